// The per-tile choice of the cuda backend (CSA tiles decided on the device
// after the selection) on crafted selections, against the rule counted on
// the host: a tile runs on the tile kernel when 16 x (the distinct regions
// its rows selected, summed over the groups) <= crossover x rows x K x G.
// Tiles whose rows selected the same regions (union K), disjoint regions
// (union rows x K), a short tile exactly at the crossover and one just past
// it, -1 entries and regions past the bitmap (not counted); the untiled
// rows are listed as themselves, a running tile's rows as -1. Outputs are
// poisoned first, so an entry left unwritten fails. A second test draws
// random selections at real shapes over each way the kernel reads them
// (16-byte or 4-byte loads, every group's bitmap at once or a few at a
// time). Without a usable GPU the tests are skipped visibly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
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

// A chunk's selection [rows, G, K] from step row row_begin, its tiles
// (first row, row count) and its untiled rows.
struct Chunk {
  int groups = kGroups;
  int topk = kTopk;
  int32_t bitmap_regions = kBitmapRegions;
  int64_t row_begin = 0;
  int64_t rows = 0;
  std::vector<int32_t> selected;  // [rows, G, K]
  std::vector<int32_t> tiles;     // [tiles, 2]
  std::vector<int32_t> untiled;

  int32_t* entries(int64_t t, int g) {
    return selected.data() + ((t - row_begin) * groups + g) * topk;
  }
  const int32_t* entries(int64_t t, int g) const {
    return selected.data() + ((t - row_begin) * groups + g) * topk;
  }
  int32_t num_tiles() const { return static_cast<int32_t>(tiles.size() / 2); }
};

// Distinct counted regions of a tile, summed over the groups.
int64_t union_of(const Chunk& c, int32_t first, int32_t count) {
  int64_t total = 0;
  for (int g = 0; g < c.groups; ++g) {
    std::set<int32_t> seen;
    for (int32_t t = first; t < first + count; ++t) {
      for (int k = 0; k < c.topk; ++k) {
        const int32_t region = c.entries(t, g)[k];
        if (region >= 0 && region < c.bitmap_regions) seen.insert(region);
      }
    }
    total += static_cast<int64_t>(seen.size());
  }
  return total;
}

struct Choice {
  std::vector<int32_t> runs;  // [tiles]
  std::vector<int32_t> list;  // [rows]
};

// The rule on the host, in the kernel's float order.
Choice expected_choice(const Chunk& c, float crossover) {
  Choice want;
  for (int64_t r = 0; r < c.rows; ++r) want.list.push_back(static_cast<int32_t>(c.row_begin + r));
  for (int32_t i = 0; i < c.num_tiles(); ++i) {
    const int32_t first = c.tiles[2 * i], count = c.tiles[2 * i + 1];
    const float tile_cost = 16.0f * static_cast<float>(union_of(c, first, count));
    const float rows_cost = crossover * static_cast<float>(count) * static_cast<float>(c.topk) *
                            static_cast<float>(c.groups);
    const bool runs = tile_cost <= rows_cost;
    want.runs.push_back(runs ? 1 : 0);
    if (runs) {
      for (int32_t r = first; r < first + count; ++r) want.list[r - c.row_begin] = -1;
    }
  }
  return want;
}

// The device's choice, its outputs poisoned first.
Choice device_choice(const Chunk& c, float crossover) {
  const sim::DeviceBuffer selected = sim::DeviceBuffer::from(Device::cuda, c.selected);
  const sim::DeviceBuffer tiles = sim::DeviceBuffer::from(Device::cuda, c.tiles);
  const sim::DeviceBuffer untiled = sim::DeviceBuffer::from(Device::cuda, c.untiled);
  const sim::DeviceBuffer runs =
      sim::DeviceBuffer::from(Device::cuda, std::vector<int32_t>(c.num_tiles(), 0x7f7f7f7f));
  const sim::DeviceBuffer list = sim::DeviceBuffer::from(
      Device::cuda, std::vector<int32_t>(static_cast<size_t>(c.rows), 0x7f7f7f7f));
  cuda_testing::launch_tile_choice(static_cast<const int32_t*>(selected.data()), c.rows, c.groups,
                                   c.topk, c.row_begin, static_cast<const int32_t*>(tiles.data()),
                                   c.num_tiles(), static_cast<const int32_t*>(untiled.data()),
                                   static_cast<int64_t>(c.untiled.size()), c.bitmap_regions,
                                   crossover, static_cast<int32_t*>(runs.data()),
                                   static_cast<int32_t*>(list.data()), nullptr);
  sim::synchronize(Device::cuda);
  return {runs.to_vector<int32_t>(static_cast<size_t>(c.num_tiles())),
          list.to_vector<int32_t>(static_cast<size_t>(c.rows))};
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

  const Choice want = expected_choice(c, kCrossover);
  // The crafted unions on both sides of the rule, two tiles each way.
  EXPECT_EQ(union_of(c, c.tiles[4], 8), 12);
  EXPECT_EQ(union_of(c, c.tiles[6], 8), 13);
  ASSERT_EQ(want.runs, (std::vector<int32_t>{1, 0, 1, 0}));

  const Choice got = device_choice(c, kCrossover);
  EXPECT_EQ(got.runs, want.runs);
  EXPECT_EQ(got.list, want.list);
}

struct Shape {
  int groups;
  int topk;
  int32_t bitmap_regions;
};

// Random selections of tiles whose regions come from pools of 1..16 x K
// regions, with -1 entries and regions past the bitmap, at shapes that take
// each load path: K = 512 with 16-byte loads and 8 groups' bitmaps at once
// (a 128K context), K = 6 with 4-byte loads and one group at a time (the
// largest bitmap), and 5 groups two at a time (a remainder pass).
TEST(CudaTileChoice, RandomUnionsOverEveryLoadPath) {
  STEP5_REQUIRE_GPU();
  const int32_t max_regions = cuda_testing::tile_choice_max_regions();
  for (const Shape shape :
       {Shape{8, 512, 16384}, Shape{8, 6, max_regions}, Shape{5, 8, max_regions / 2}}) {
    SCOPED_TRACE("G " + std::to_string(shape.groups) + " K " + std::to_string(shape.topk) +
                 " bitmap " + std::to_string(shape.bitmap_regions));
    const int g_count = shape.groups, k_count = shape.topk;
    std::mt19937 rng(static_cast<uint32_t>(g_count * 1000 + k_count));
    Chunk c;
    c.groups = g_count;
    c.topk = k_count;
    c.bitmap_regions = shape.bitmap_regions;
    c.row_begin = 7;
    int64_t t = c.row_begin;
    for (int i = 0; i < 13; ++i) {
      if (i == 5) {
        for (int u = 0; u < 3; ++u) c.untiled.push_back(static_cast<int32_t>(t++));
      }
      const int32_t count = i == 12 ? 5 : 16;
      c.tiles.push_back(static_cast<int32_t>(t));
      c.tiles.push_back(count);
      t += count;
    }
    c.rows = t - c.row_begin;
    c.selected.assign(static_cast<size_t>(c.rows * g_count * k_count), -1);
    for (int32_t i = 0; i < c.num_tiles(); ++i) {
      // One pool per (tile, group), shared by the tile's rows.
      const int32_t pool = k_count * (1 + i % 16);
      std::vector<int32_t> bases;
      for (int g = 0; g < g_count; ++g) {
        bases.push_back(
            static_cast<int32_t>(rng() % static_cast<uint32_t>(shape.bitmap_regions - pool + 1)));
      }
      for (int64_t row = c.tiles[2 * i]; row < c.tiles[2 * i] + c.tiles[2 * i + 1]; ++row) {
        for (int g = 0; g < g_count; ++g) {
          const int32_t base = bases[static_cast<size_t>(g)];
          for (int k = 0; k < k_count; ++k) {
            const uint32_t roll = rng() % 32;
            c.entries(row, g)[k] = roll == 0 ? -1
                                   : roll == 1
                                       ? shape.bitmap_regions + static_cast<int32_t>(rng() % 64)
                                       : base + static_cast<int32_t>(rng() % pool);
          }
        }
      }
    }
    for (int32_t u : c.untiled) {
      for (int g = 0; g < g_count; ++g) {
        for (int k = 0; k < k_count; ++k) c.entries(u, g)[k] = k;
      }
    }
    constexpr float kRandomCrossover = 6.0f;
    const Choice want = expected_choice(c, kRandomCrossover);
    // Both decisions occur, so a kernel that always or never keeps tiles fails.
    ASSERT_NE(std::count(want.runs.begin(), want.runs.end(), 1), 0);
    ASSERT_NE(std::count(want.runs.begin(), want.runs.end(), 0), 0);
    const Choice got = device_choice(c, kRandomCrossover);
    EXPECT_EQ(got.runs, want.runs);
    EXPECT_EQ(got.list, want.list);
  }
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
