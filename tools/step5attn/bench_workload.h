// Host side of `step5attn bench`: step metadata, CSA selections in two
// regimes, their neighbour overlap, and the byte and FLOP counts that turn
// a measured time into TB/s and TFLOP/s.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "step5/config.h"
#include "step5/step.h"

namespace step5::tool::bench {

// One benchmarked step: `batch` requests of `context` tokens after the step,
// each with `query_len` new rows at its end (1 = decode, k+1 = MTP verify,
// more = a prefill chunk).
struct Shape {
  LayerKind kind = LayerKind::csa;
  DType kv = DType::bf16;
  int64_t context = 8192;
  int batch = 1;
  int query_len = 1;
  bool correlated = false;    // CSA selections of neighbouring rows overlap
  std::string phase() const;  // "decode", "verify" or "prefill"
};

// A step over requests that all end at `seq_lens[r]`, with its block table
// drawn from a pool of `pool_blocks` blocks: distinct blocks while they
// last, then aliased (a 1M-token batch of 128 would need 800 GB; reads of
// aliased blocks stay far apart, so L2 reuse is not inflated).
struct StepHost {
  int32_t num_requests = 0;
  int64_t num_tokens = 0;
  int32_t max_blocks = 0;
  std::vector<int32_t> query_start_loc;  // [R+1]
  std::vector<int32_t> seq_lens;         // [R]
  std::vector<int32_t> block_table;      // [R, max_blocks]
  std::vector<int64_t> slot_mapping;     // [n]
  std::vector<int32_t> ring_index;       // [R] = r
  std::vector<int32_t> row_request;      // [n]
  std::vector<int32_t> row_position;     // [n]
};
StepHost make_step(const LayerConfig& config, const std::vector<int32_t>& seq_lens,
                   const std::vector<int32_t>& query_lens, int64_t pool_blocks,
                   std::mt19937_64& rng);

// selected [n, G, K] for CSA rows: every closed region when C <= K, else K
// distinct regions, ascending, -1 padded. Independent: each row draws
// afresh. Correlated: a row keeps its predecessor's (same request, group)
// selection but for about 1/8 of it, as slowly drifting index queries do.
std::vector<int32_t> make_selection(const LayerConfig& config, const StepHost& step,
                                    bool correlated, std::mt19937_64& rng);

// Mean Jaccard index of the selections of consecutive rows of one request
// (per group); -1 when no request has two rows.
double neighbour_jaccard(const LayerConfig& config, const StepHost& step,
                         const std::vector<int32_t>& selected);

// Mean over the plan's row tiles (StepPlan::row_tiles: [tiles, 2] first row,
// row count) and the groups of |union of the tile rows' selected regions|
// divided by the rows' mean selection size: the work a union tile walks per
// useful region (1 when a tile's rows select alike; C / K at most). -1 when
// the plan has no tiles.
double tile_union_ratio(const LayerConfig& config, const std::vector<int32_t>& row_tiles,
                        const std::vector<int32_t>& selected);

// The most launches one forward of `kind` makes for `plan`: CSA a cache
// update, then indexer, select and attention per scoring chunk; SWA a K/V
// write and the attention (bench_timer.h's host timing sizes its batches
// from it).
int64_t max_launches_per_forward(const StepPlan& plan, LayerKind kind);

// Work of one attention launch over all rows of `step`.
//   keys(row)  = CSA: 8 * |selected| + (p - 8c + 1); SWA: min(W, p + 1)
//   pages(row) = CSA: |selected| + 1; SWA: p/8 - max(0, p-W+1)/8 + 1
//   flops = sum_rows H * keys * 4D                      (2D for q.k, 2D for p.v)
//   bytes = sum_rows G * pages * 8 * 2D * sizeof(kv)    (K and V of every page read)
//         + n*H*D*2 * 2 (query in, output out) + n*H*2 (gate) + n*G*K*4 (CSA selection)
// Bytes count what the kernel requests, once per (row, group): pages that
// neighbouring rows share may come from L2.
struct Counts {
  double flops = 0;
  double bytes = 0;
  double floor_bytes = 0;  // each input read once, each output written once
};
Counts attention_counts(const LayerConfig& config, const StepHost& step,
                        const std::vector<int32_t>* selected);

// Extra work of a whole CSA layer step over the attention:
//   KV write: n*G*2D*sizeof(kv); indexer: every closed summary of each
//   request once (R * C * Di * sizeof(summary), the unique bytes), scores
//   written and read back (2 * n*G*C*4); flops n*G*I*C*2Di. The floor
//   leaves out the scores (a fused selection need not store them).
Counts csa_layer_extra(const LayerConfig& config, const StepHost& step);
// The KV write of any layer: n*G*2D*sizeof(kv), floor included.
Counts kv_write_counts(const LayerConfig& config, const StepHost& step);
// Attention of CSA rows that all select K regions (C > K): the counts of
// attention_counts without drawing selections.
Counts csa_full_attention_counts(const LayerConfig& config, const StepHost& step);

}  // namespace step5::tool::bench
