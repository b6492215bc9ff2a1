// StepPlan::row_tiles and untiled_rows (the cuda tile attention's work
// list, planned on the host for every backend): random mixed steps, with
// scoring chunks of many sizes, must split their rows exactly once into
// tiles of up to 16 rows of one request with >= 8 query rows, never across
// a chunk, and a list of the other rows; uniform steps and
// TileAttention::never plan no tiles.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "test_util.h"

namespace step5 {
namespace {

constexpr int32_t kTileRows = 16;
constexpr int32_t kMinRows = 8;

int32_t request_of(const StepPlan& plan, int64_t t) {
  return plan.row_request[static_cast<size_t>(t)];
}
int32_t query_rows(const StepPlan& plan, int32_t r) {
  const auto i = static_cast<size_t>(r);
  return plan.query_start[i + 1] - plan.query_start[i];
}

// Every property of the tiles and the untiled list of `plan`; empty when
// all hold, else the first that does not.
std::string tile_fault(const StepPlan& plan) {
  if (plan.kind != StepKind::mixed) {
    return plan.row_tiles.empty() && plan.untiled_rows.empty() ? "" : "tiles of a non-mixed step";
  }
  std::vector<int> covered(static_cast<size_t>(plan.num_tokens), 0);
  if (plan.row_tiles.size() % 2 != 0) return "row_tiles has an odd length";
  int64_t tiles_seen = 0, untiled_seen = 0;
  for (const ScoreChunk& chunk : plan.chunks) {
    if (chunk.tiles.begin != tiles_seen || chunk.untiled.begin != untiled_seen) {
      return "chunk ranges do not follow each other";
    }
    for (int64_t k = chunk.tiles.begin; k < chunk.tiles.end; ++k) {
      const int32_t first = plan.row_tiles[static_cast<size_t>(2 * k)];
      const int32_t count = plan.row_tiles[static_cast<size_t>(2 * k + 1)];
      if (count < 1 || count > kTileRows) return "a tile of " + std::to_string(count) + " rows";
      if (first < chunk.rows.begin || first + count > chunk.rows.end)
        return "a tile crosses a chunk";
      const int32_t r = request_of(plan, first);
      if (request_of(plan, first + count - 1) != r) return "a tile spans two requests";
      if (query_rows(plan, r) < kMinRows) return "a tile of a request with < 8 rows";
      // Only the last tile of a request's rows in a chunk may be short.
      const int64_t segment_end =
          std::min<int64_t>(chunk.rows.end, plan.query_start[static_cast<size_t>(r) + 1]);
      if (count < kTileRows && first + count != segment_end) return "a short tile mid-request";
      for (int32_t t = first; t < first + count; ++t) ++covered[static_cast<size_t>(t)];
    }
    int32_t previous = -1;
    for (int64_t k = chunk.untiled.begin; k < chunk.untiled.end; ++k) {
      const int32_t t = plan.untiled_rows[static_cast<size_t>(k)];
      if (t <= previous) return "untiled rows not ascending";
      if (t < chunk.rows.begin || t >= chunk.rows.end) return "an untiled row outside its chunk";
      if (query_rows(plan, request_of(plan, t)) >= kMinRows) {
        return "a row of a request with >= 8 rows left untiled";
      }
      ++covered[static_cast<size_t>(t)];
      previous = t;
    }
    tiles_seen = chunk.tiles.end;
    untiled_seen = chunk.untiled.end;
  }
  if (tiles_seen * 2 != static_cast<int64_t>(plan.row_tiles.size()) ||
      untiled_seen != static_cast<int64_t>(plan.untiled_rows.size())) {
    return "chunks do not cover every tile and untiled row";
  }
  for (int64_t t = 0; t < plan.num_tokens; ++t) {
    if (covered[static_cast<size_t>(t)] != 1) {
      return "row " + std::to_string(t) + " covered " +
             std::to_string(covered[static_cast<size_t>(t)]) + " times";
    }
  }
  return "";
}

TEST(RowTiles, MixedStepsSplitEveryRowOnce) {
  auto backend = test::cpu_backend();
  const std::vector<LayerConfig> layers{test::csa_config({16, 2, 64, 16}, 8),
                                        test::swa_config({8, 1, 128, 16}, 64)};
  const StepLimits limits{300, 6, 700};
  std::mt19937_64 rng(5);
  int mixed = 0, with_tiles = 0, with_both = 0;
  for (size_t max_score_bytes : {size_t{256} << 20, size_t{3000}, size_t{100}}) {
    PlanOptions options;
    options.max_score_bytes = max_score_bytes;
    for (int i = 0; i < 200; ++i) {
      const sim::StepBuffers s = test::random_step(limits, 16, rng);
      const StepPlan plan = backend->plan(s.desc, layers, options);
      const std::string fault = tile_fault(plan);
      ASSERT_EQ(fault, "") << "step " << i << ": n=" << plan.num_tokens
                           << " chunks=" << plan.chunks.size()
                           << " kind=" << step_kind_name(plan.kind);
      if (plan.kind != StepKind::mixed) continue;
      ++mixed;
      with_tiles += plan.row_tiles.empty() ? 0 : 1;
      with_both += !plan.row_tiles.empty() && !plan.untiled_rows.empty() ? 1 : 0;
      options.tile_attention = TileAttention::never;
      const StepPlan none = backend->plan(s.desc, layers, options);
      options.tile_attention = TileAttention::automatic;
      EXPECT_TRUE(none.row_tiles.empty() && none.untiled_rows.empty());
    }
  }
  // The generator must have produced the cases the properties are about.
  EXPECT_GT(mixed, 100);
  EXPECT_GT(with_tiles, 50);
  EXPECT_GT(with_both, 10);
}

// A detector that only looks right: a plan whose tiles are wrong in each
// way must be caught by tile_fault.
TEST(RowTiles, FaultsAreDetected) {
  auto backend = test::cpu_backend();
  const std::vector<LayerConfig> layers{test::csa_config({16, 2, 64, 16}, 8)};
  sim::StepHost h;
  h.query_start_loc = {0, 3, 43};
  h.seq_lens = {100, 200};
  h.ring_index = {0, 1};
  h.max_blocks = 13;
  for (int32_t r = 0; r < 2; ++r) {
    for (int32_t j = 0; j < 13; ++j) h.block_table.push_back(r * 13 + j);
    const auto i = static_cast<size_t>(r);
    const int32_t q = h.query_start_loc[i + 1] - h.query_start_loc[i];
    const int32_t len = h.seq_lens[i];
    for (int32_t p = len - q; p < len; ++p) {
      h.slot_mapping.push_back(int64_t{r * 13 + p / 16} * 16 + p % 16);
    }
  }
  const sim::StepBuffers step(Device::host, std::move(h), 43);
  const StepPlan good = backend->plan(step.desc, layers);
  ASSERT_EQ(tile_fault(good), "");
  // Request 1's 40 rows: tiles of 16, 16, 8; request 0's 3 rows untiled.
  EXPECT_EQ(good.row_tiles, (std::vector<int32_t>{3, 16, 19, 16, 35, 8}));
  EXPECT_EQ(good.untiled_rows, (std::vector<int32_t>{0, 1, 2}));

  StepPlan bad = good;
  bad.row_tiles[1] = 17;
  EXPECT_NE(tile_fault(bad), "");
  bad = good;
  bad.row_tiles[3] = 15;  // a short tile mid-request leaves a row uncovered
  EXPECT_NE(tile_fault(bad), "");
  bad = good;
  bad.untiled_rows.push_back(3);
  bad.chunks.back().untiled.end += 1;
  EXPECT_NE(tile_fault(bad), "");
  bad = good;
  bad.row_tiles[0] = 2;  // starts in request 0
  EXPECT_NE(tile_fault(bad), "");
}

}  // namespace
}  // namespace step5
