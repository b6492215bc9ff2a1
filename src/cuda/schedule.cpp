#include "cuda/schedule.h"

#include <algorithm>

#include "core/check.h"
#include "core/plan.h"
#include "cuda/attention/launch.h"
#include "cuda/heuristics.h"
#include "cuda/indexer/params.h"
#include "cuda/indexer/tc_launch.h"
#include "cuda/tile_attention/heuristics.h"
#include "cuda/tile_attention/hopper_geometry.h"
#include "cuda/tile_attention/params.h"
#include "cuda/tile_attention/tile_choice.h"

namespace step5::cuda {

namespace {

// Most query rows any request has inside one scoring chunk.
int64_t max_rows_per_request(const StepPlan& plan) {
  if (plan.kind == StepKind::uniform) return plan.query_len;
  int64_t most = 0;
  for (int32_t r = 0; r < plan.num_requests; ++r) {
    const auto i = static_cast<size_t>(r);
    most = std::max<int64_t>(most, plan.query_start[i + 1] - plan.query_start[i]);
  }
  return std::min(most, plan.chunk_rows);
}

// Fills the tensor-core indexer's work shape, or leaves the generic path.
void schedule_indexer(const DeviceInfo& device, const StepPlan& plan, const LayerConfig& c,
                      LayerSchedule& s) {
  bool scored = false;
  for (const ScoreChunk& chunk : plan.chunks) scored = scored || chunk.columns > c.topk;
  if (!scored) {
    s.indexer = IndexerPath::none;
    return;
  }
  s.indexer = IndexerPath::generic;
  // The tensor-core kernel is sm_90a code: only the Hopper path runs it.
  if (device.path != KernelPath::hopper) return;
  const int G = c.num_kv_heads;
  const int heads = indexer_tc_heads();
  const int max_slots = 256 / heads;  // wgmma N <= 256
  if (!indexer_tc_supports(c) || G > max_slots || plan.num_requests > indexer_tc_max_requests()) {
    return;
  }
  // Slots (rows x G) padded to a power of two >= 8 so N is 32..256; a
  // request's rows go into as few blocks as possible (each block reads the
  // request's summaries once).
  const int64_t rows = std::max<int64_t>(1, max_rows_per_request(plan));
  int slots = 8;
  while (slots < max_slots && slots < rows * G) slots *= 2;
  const int summary_bytes = c.summary_dtype == DType::fp8_e4m3 ? 1 : 2;
  // Fewer slots when one consumer's query operand would not fit next to
  // the fewest stages (2 KB kept for the kernel's static shared memory).
  const size_t budget = device.max_smem_per_block - 2048;
  auto smem_of = [&](int tile_n, int consumers, int stages) {
    return indexer_tc_smem_bytes(tile_n, c.index_dim, summary_bytes, plan.num_requests, consumers,
                                 stages);
  };
  while (slots >= 8 && smem_of(slots * heads, 1, indexer_tc_min_stages()) > budget) slots /= 2;
  if (slots < 8 || slots < G) return;
  const int tile_n = slots * heads;
  // Consumers and stages (heuristics.h): the most consumers that still
  // leave a stage in flight beyond the ones they read, then the most
  // stages that fit, a multiple of the consumers: consumer c then reads
  // only stages s with s % consumers == c and waits for every phase of
  // their full barriers. (With five stages and two consumers a consumer
  // could wait on a stage two phases ahead of its barrier, where the parity
  // aliases: the 1M b32 decode indexer failed on the H200.) One CTA per SM,
  // a persistent grid.
  int consumers = 0, stages = 0;
  for (int n = indexer_tc_max_consumers(); n >= 1 && stages == 0; --n) {
    const int fewest = std::max(indexer_tc_min_stages(), n + 1);
    for (int k = indexer_tc_max_stages(); k >= fewest; --k) {
      if (k % n == 0 && smem_of(tile_n, n, k) <= budget) {
        consumers = n;
        stages = k;
        break;
      }
    }
  }
  if (stages == 0) return;
  if (indexer_tc_ctas_per_sm(tile_n, c.summary_dtype, smem_of(tile_n, consumers, stages)) < 1) {
    return;  // not even one CTA resident: the generic path
  }
  s.indexer = IndexerPath::tensor_core;
  s.indexer_tile_n = tile_n;
  s.indexer_rows_per_unit = static_cast<int32_t>(std::min<int64_t>(rows, slots / G));
  s.indexer_consumers = consumers;
  s.indexer_stages = stages;
  s.indexer_ctas = device.sm_count;
}

// Whether the layer's tiles would run the sm_90a (wgmma) tile kernel.
bool tile_wgmma(const DeviceInfo& device, const LayerConfig& c) {
  return device.path == KernelPath::hopper &&
         tile_attention_wgmma_supports(c, device.max_smem_per_block);
}

// How the plan's row tiles run for this layer (`wgmma`: on the kernel that
// would run them): `tiled` false sends every row to the row kernel; a
// crossover > 0 has the device decide tile by tile (tile_choice.h).
struct TileRule {
  bool tiled = false;
  float crossover = 0.0f;
};

TileRule tile_rule(const DeviceInfo& device, const StepPlan& plan, const LayerConfig& c,
                   bool wgmma) {
  if (plan.row_tiles.empty() || !tile_attention_supports(c, device.max_smem_per_block)) {
    return {};
  }
  if (plan.tile_attention == TileAttention::always || c.kind == LayerKind::swa) return {true};
  const double crossover = plan.tile_union_crossover > 0.0
                               ? plan.tile_union_crossover
                               : tiled::tile_union_crossover_wgmma(c.kv_dtype == DType::fp8_e4m3);
  switch (tiled::csa_tiles(plan.max_closed, c.topk, wgmma, crossover, plan.score_stride)) {
    case tiled::CsaTiles::tiles: return {true};
    case tiled::CsaTiles::per_tile: return {true, static_cast<float>(crossover)};
    default: return {};
  }
}

}  // namespace

bool csa_tiles_may_be_chosen(const DeviceInfo& device, const LayerConfig& config) {
  return config.kind == LayerKind::csa && tile_wgmma(device, config);
}

LayerSchedule schedule_layer(const DeviceInfo& device, const StepPlan& plan, const LayerConfig& c) {
  require_paged_attention_supports(c);
  LayerSchedule s;
  // CSA attention runs once per scoring chunk, SWA once over the step.
  const int64_t rows = c.kind == LayerKind::csa ? plan.chunk_rows : plan.num_tokens;
  s.attention_splits = paged_attention_splits(c, rows, device.sm_count);
  s.attention_stages = paged_attention_stages(c, device.max_smem_per_block);
  s.scratch_bytes = paged_attention_scratch_bytes(c, rows, s.attention_splits);
  s.counters_bytes = paged_attention_counters_bytes(c, rows, s.attention_splits);
  const bool wgmma = tile_wgmma(device, c);
  const TileRule tiles = tile_rule(device, plan, c, wgmma);
  s.tiled_attention = tiles.tiled;
  s.tile_wgmma = s.tiled_attention && wgmma;
  s.tile_union_crossover = tiles.crossover;
  if (s.tile_union_crossover > 0.0f) {
    // The choice's arrays follow the split partials in the backend scratch.
    s.tile_choice_offset = detail::align_up(s.scratch_bytes, detail::kWorkspaceAlign);
    s.scratch_bytes = s.tile_choice_offset + tile_choice_bytes(plan.chunk_rows);
  }
  if (s.tile_wgmma && c.kind == LayerKind::swa) {
    s.tile_ctas = device.sm_count * tiled::hopper_ctas_per_sm();
  }
  if (c.kind == LayerKind::swa) {
    s.kv_write_in_attention = !s.tiled_attention && max_rows_per_request(plan) <= 1;
  }
  if (c.kind == LayerKind::csa) {
    schedule_indexer(device, plan, c, s);
    // A row at position p scores regions j < p / 8, each closed by a row
    // before p: with one query row per request none of them closes in this
    // step, so the summaries need not precede the indexer.
    s.cache_update_in_select = plan.chunks.size() == 1 && max_rows_per_request(plan) <= 1;
    // sm_90 (griddepcontrol): a dependent kernel's CTAs take the SMs the
    // indexer's and selection's CTAs leave, instead of waiting for the whole
    // grid to end and the next launch to start.
    s.programmatic_launch = device.major >= 9;
    // A chunk's selections, one CTA each (heuristics.h).
    const bool many =
        plan.chunk_rows * c.num_kv_heads >= int64_t{select_many_ctas_per_sm()} * device.sm_count;
    s.select_short_columns = many ? select_many_short_columns() : select_short_columns();
    s.select_staged_columns =
        many && select_staged_fits(device.max_smem_per_block) ? select_staged_columns() : 0;
    s.select_wide = plan.chunk_rows * c.num_kv_heads <= int64_t{device.sm_count};
    s.select_long_rows = select_long_rows_fit(device.max_smem_per_block);
    s.select_cluster_parts = select_cluster_parts(plan.chunk_rows * c.num_kv_heads, device.sm_count,
                                                  device.select_active_clusters);
  }
  if (s.indexer == IndexerPath::generic) {
    // The generic kernel stages every index query of a row in shared
    // memory: refuse at plan time what this GPU cannot hold (the portable
    // path has less than Hopper), so no forward fails half-way.
    const size_t generic_smem = indexer_generic_smem_bytes(c);
    detail::require(generic_smem <= device.max_smem_per_block, ErrorCode::unsupported,
                    "cuda backend indexer: G*I*Di*4 bytes of index queries in shared memory "
                    "expected <= ",
                    device.max_smem_per_block, " on this GPU, got ", generic_smem,
                    " (G=", c.num_kv_heads, " I=", c.index_heads, " Di=", c.index_dim, ")");
  }
  return s;
}

}  // namespace step5::cuda
