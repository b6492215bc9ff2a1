// indexer_scores: score(t, g, j) = sum_h w[t,g,h] * relu(q[t,g,h] . S_j)
// over each row's closed regions (SPEC 4), fp32 from the stored summaries.
#include <algorithm>
#include <cmath>

#include "core/plan.h"
#include "cpu/cache_access.h"
#include "cpu/kernels.h"

namespace step5::cpu {

namespace {

// Regions dequantized together. One task scores one tile of one request's
// regions for all of that request's rows, so each summary is dequantized
// once per (request, call) and a tile (64 KiB at Di = 256) stays in cache.
constexpr int64_t kTile = 64;

struct IndexerScratch {
  float* summaries;  // [kTile, Di]
  float* query;      // [Di]
  float* acc;        // [kTile]

  static IndexerScratch carve(SlabCursor& cursor, const LayerConfig& c) {
    IndexerScratch w{};
    w.summaries = cursor.take<float>(static_cast<size_t>(kTile) * static_cast<size_t>(c.index_dim));
    w.query = cursor.take<float>(static_cast<size_t>(c.index_dim));
    w.acc = cursor.take<float>(kTile);
    return w;
  }
};

}  // namespace

size_t indexer_slab_bytes(const LayerConfig& config) {
  SlabCursor cursor(nullptr);
  IndexerScratch::carve(cursor, config);
  return cursor.used();
}

namespace kernel {

void indexer_scores(const StepArgs& a, const Scratch& scratch, RowRange rows,
                    const TensorView& index_query, const TensorView& index_weight,
                    const SummaryCacheView& summaries, const TensorView& scores,
                    bool only_over_topk) {
  if (rows.size() == 0) return;
  const LayerConfig& c = a.config;
  const StepRows& step_rows = a.rows;
  const int G = c.num_kv_heads;
  const int Di = c.index_dim;
  const int regions_per_block = c.block_size / kRegionSize;
  auto closed = [&](int64_t t) {
    return int64_t{detail::closed_regions(step_rows.row_position[t])};
  };
  auto wanted = [&](int64_t t) { return !only_over_topk || closed(t) > c.topk; };

  // Entries past a row's closed regions.
  const int64_t width = scores.shape[2];
  a.pool.parallel_for(rows.size(), [&](int64_t i, int) {
    const int64_t t = rows.begin + i;
    if (!wanted(t)) return;
    for (int g = 0; g < G; ++g)
      std::fill(at<float>(scores, i, g) + closed(t), at<float>(scores, i, g) + width, -INFINITY);
  });

  // Rows of one request are consecutive with rising positions, so the last
  // row of a request's segment has the most closed regions. Padding rows
  // (past live_rows) have none.
  const int64_t live_end = std::min(rows.end, step_rows.live_rows);
  if (live_end <= rows.begin) return;
  const int32_t first_request = step_rows.row_request[rows.begin];
  const int32_t end_request = step_rows.row_request[live_end - 1] + 1;
  auto segment = [&](int32_t r) {
    return RowRange{std::max<int64_t>(rows.begin, step_rows.query_start[r]),
                    std::min<int64_t>(live_end, step_rows.query_start[r + 1])};
  };
  int64_t max_tiles = 0;
  for (int32_t r = first_request; r < end_request; ++r) {
    const RowRange seg = segment(r);
    if (seg.size() > 0) max_tiles = std::max(max_tiles, (closed(seg.end - 1) + kTile - 1) / kTile);
  }
  if (max_tiles == 0) return;

  // Tasks are (request, tile) pairs; tiles past a request's regions are empty.
  a.pool.parallel_for((end_request - first_request) * max_tiles, [&](int64_t item, int thread) {
    const auto r = static_cast<int32_t>(first_request + item / max_tiles);
    const int64_t j0 = (item % max_tiles) * kTile;
    const RowRange seg = segment(r);
    if (seg.size() == 0) return;
    const int64_t request_closed = closed(seg.end - 1);
    if (j0 >= request_closed || !wanted(seg.end - 1)) return;
    const int64_t j1 = std::min(request_closed, j0 + kTile);

    SlabCursor cursor(scratch.slab(thread));
    const IndexerScratch w = IndexerScratch::carve(cursor, c);
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t block = block_of(a.step, r, j * kRegionSize, c.block_size);
      load_row(summaries.dtype, summary_row(summaries, block, j % regions_per_block), 1.0f, Di,
               w.summaries + (j - j0) * Di);
    }
    for (int64_t t = seg.begin; t < seg.end; ++t) {
      if (!wanted(t) || closed(t) <= j0) continue;
      const int64_t count = std::min(j1, closed(t)) - j0;
      for (int g = 0; g < G; ++g) {
        std::fill(w.acc, w.acc + count, 0.0f);
        const float* weight = at<const float>(index_weight, t, g);
        for (int h = 0; h < c.index_heads; ++h) {
          const uint16_t* q = at<const uint16_t>(index_query, t, g, h);
          for (int d = 0; d < Di; ++d) w.query[d] = bf16_to_float(q[d]);
          for (int64_t j = 0; j < count; ++j) {
            const float logit = dot(w.query, w.summaries + j * Di, Di);
            // relu that lets NaN through, so bad inputs stay visible.
            w.acc[j] += weight[h] * (logit < 0.0f ? 0.0f : logit);
          }
        }
        std::copy(w.acc, w.acc + count, at<float>(scores, t - rows.begin, g) + j0);
      }
    }
  });
}

}  // namespace kernel
}  // namespace step5::cpu
