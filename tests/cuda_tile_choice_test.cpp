// The per-tile choice of the cuda backend (CSA tiles decided on the device
// after the selection) on crafted selections, against the rule counted on
// the host: a tile runs on the tile kernel when 16 x (the distinct regions
// its rows selected, summed over the groups) <= crossover x rows x K x G.
// Tiles whose rows selected the same regions (union K), disjoint regions
// (union rows x K), a short tile exactly at the crossover and one just past
// it, -1 entries and regions past the bitmap (not counted); the untiled
// rows are listed as themselves, a running tile's rows as -1. Outputs are
// poisoned first, so an entry left unwritten fails. Without a usable GPU
// the test is skipped visibly.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "step5/attention.h"
#include "step5/testing/cuda_internals.h"
#include "step5/testing/device_memory.h"
#include "test_util.h"

namespace step5 {
namespace {

#if !defined(STEP5_HAVE_CUDA)
TEST(CudaTileChoice, TilesDecidedByTheirUnion) {
  GTEST_SKIP() << "built without the cuda backend: no tile choice to test";
}
#else
constexpr int kGroups = 2;
constexpr int kTopk = 8;
constexpr int32_t kBitmapRegions = 256;
constexpr float kCrossover = 1.5f;

struct Chunk {
  int64_t row_begin = 0;
  int64_t rows = 0;
  std::vector<int32_t> selected;  // [rows, G, K]
  std::vector<int32_t> tiles;     // [tiles, 2]
  std::vector<int32_t> untiled;

  int32_t* entries(int64_t t, int g) {
    return selected.data() + ((t - row_begin) * kGroups + g) * kTopk;
  }
};

// Distinct counted regions of a tile, summed over the groups.
int64_t union_of(Chunk& c, int32_t first, int32_t count) {
  int64_t total = 0;
  for (int g = 0; g < kGroups; ++g) {
    std::set<int32_t> seen;
    for (int32_t t = first; t < first + count; ++t) {
      for (int k = 0; k < kTopk; ++k) {
        const int32_t region = c.entries(t, g)[k];
        if (region >= 0 && region < kBitmapRegions) seen.insert(region);
      }
    }
    total += static_cast<int64_t>(seen.size());
  }
  return total;
}

TEST(CudaTileChoice, TilesDecidedByTheirUnion) {
  STEP5_REQUIRE_GPU();
  Chunk c;
  c.row_begin = 100;
  c.rows = 16 + 16 + 3 + 8 + 8 + 4;  // tiles of 16, 16, 8, 8 rows, 3 + 4 untiled rows
  c.selected.assign(static_cast<size_t>(c.rows * kGroups * kTopk), -1);
  int64_t t = c.row_begin;
  auto add_tile = [&](int32_t count) {
    c.tiles.push_back(static_cast<int32_t>(t));
    c.tiles.push_back(count);
    t += count;
  };
  auto add_untiled = [&](int count) {
    for (int i = 0; i < count; ++i) c.untiled.push_back(static_cast<int32_t>(t++));
  };
  // Tile 0: every row selects regions 10..17 (union K per group): runs.
  add_tile(16);
  for (int64_t r = 0; r < 16; ++r) {
    for (int g = 0; g < kGroups; ++g) {
      for (int k = 0; k < kTopk; ++k) c.entries(c.row_begin + r, g)[k] = 10 + k + 40 * g;
    }
  }
  // Tile 1: disjoint selections (union 16 K per group): rows. One entry of
  // each row is -1 and one is past the bitmap, neither counted.
  add_tile(16);
  for (int64_t r = 0; r < 16; ++r) {
    for (int g = 0; g < kGroups; ++g) {
      int32_t* e = c.entries(c.row_begin + 16 + r, g);
      for (int k = 0; k < kTopk; ++k) e[k] = static_cast<int32_t>(r * kTopk + k) % 250;
      e[0] = -1;
      e[1] = kBitmapRegions + static_cast<int32_t>(r);
    }
  }
  add_untiled(3);
  // Tile 2: 8 rows, where the rule reads 16 U <= 1.5 x 8 x 8 x 2 = 192:
  // group 0 selects regions 0..3 (and -1), group 1 regions 50..57, so U =
  // 4 + 8 = 12, exactly at the crossover: runs.
  auto add_union_12 = [&]() {
    const int64_t first = t;
    add_tile(8);
    for (int64_t r = first; r < first + 8; ++r) {
      for (int k = 0; k < kTopk; ++k) {
        c.entries(r, 0)[k] = k < 4 ? k : -1;
        c.entries(r, 1)[k] = 50 + k;
      }
    }
    return first;
  };
  add_union_12();
  // Tile 3: the same plus one more region in group 0: U = 13 (rows).
  const int64_t tile3 = add_union_12();
  c.entries(tile3 + 7, 0)[4] = 4;
  add_untiled(4);
  ASSERT_EQ(t, c.row_begin + c.rows);

  const int32_t num_tiles = static_cast<int32_t>(c.tiles.size() / 2);
  std::vector<int32_t> want_runs, want_list;
  for (int64_t r = 0; r < c.rows; ++r) want_list.push_back(static_cast<int32_t>(c.row_begin + r));
  for (int32_t i = 0; i < num_tiles; ++i) {
    const int32_t first = c.tiles[2 * i], count = c.tiles[2 * i + 1];
    const int64_t u = union_of(c, first, count);
    const bool runs =
        16.0f * static_cast<float>(u) <= kCrossover * static_cast<float>(count) * kTopk * kGroups;
    want_runs.push_back(runs ? 1 : 0);
    if (runs) {
      for (int32_t r = first; r < first + count; ++r) want_list[r - c.row_begin] = -1;
    }
  }
  // The crafted unions on both sides of the rule, two tiles each way.
  EXPECT_EQ(union_of(c, c.tiles[4], 8), 12);
  EXPECT_EQ(union_of(c, c.tiles[6], 8), 13);
  ASSERT_EQ(want_runs, (std::vector<int32_t>{1, 0, 1, 0}));

  const sim::DeviceBuffer selected = sim::DeviceBuffer::from(Device::cuda, c.selected);
  const sim::DeviceBuffer tiles = sim::DeviceBuffer::from(Device::cuda, c.tiles);
  const sim::DeviceBuffer untiled = sim::DeviceBuffer::from(Device::cuda, c.untiled);
  const sim::DeviceBuffer runs =
      sim::DeviceBuffer::from(Device::cuda, std::vector<int32_t>(num_tiles, 0x7f7f7f7f));
  const sim::DeviceBuffer list = sim::DeviceBuffer::from(
      Device::cuda, std::vector<int32_t>(static_cast<size_t>(c.rows), 0x7f7f7f7f));
  cuda_testing::launch_tile_choice(static_cast<const int32_t*>(selected.data()), c.rows, kGroups,
                                   kTopk, c.row_begin, static_cast<const int32_t*>(tiles.data()),
                                   num_tiles, static_cast<const int32_t*>(untiled.data()),
                                   static_cast<int64_t>(c.untiled.size()), kBitmapRegions,
                                   kCrossover, static_cast<int32_t*>(runs.data()),
                                   static_cast<int32_t*>(list.data()), nullptr);
  sim::synchronize(Device::cuda);
  EXPECT_EQ(runs.to_vector<int32_t>(static_cast<size_t>(num_tiles)), want_runs);
  EXPECT_EQ(list.to_vector<int32_t>(static_cast<size_t>(c.rows)), want_list);
}

// Bad parameters are refused before any launch, naming what is wrong.
TEST(CudaTileChoice, InconsistentParamsAreRefused) {
  STEP5_REQUIRE_GPU();
  const sim::DeviceBuffer buffer(Device::cuda, 4096);
  auto* p = static_cast<int32_t*>(buffer.data());
  try {
    cuda_testing::launch_tile_choice(p, 16, kGroups, kTopk, 0, p, 1, nullptr, 0, 100, kCrossover, p,
                                     p, nullptr);
    FAIL() << "a bitmap of 100 regions (not a multiple of 32) was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("bitmap regions"), std::string::npos) << e.what();
  }
  try {
    cuda_testing::launch_tile_choice(p, 16, kGroups, kTopk, 0, p, 10, p, 10, 128, kCrossover, p, p,
                                     nullptr);
    FAIL() << "10 tiles and 10 untiled rows were accepted in a chunk of 16 rows";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  }
}

#endif

}  // namespace
}  // namespace step5
