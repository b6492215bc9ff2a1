#include "cuda/forward.h"

#include "core/check.h"
#include "core/plan.h"
#include "core/validate.h"
#include "cuda/attention/launch.h"
#include "cuda/common/check.h"
#include "cuda/summaries/launch.h"
#include "cuda/tile_attention/params.h"
#include "cuda/tile_attention/tile_choice.h"
#include "cuda/views.h"

namespace step5::cuda {

namespace {

constexpr Device kDev = Device::cuda;

template <class T>
T* at(Workspace ws, size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(ws.data) + offset);
}

// Mixed steps read the plan's row tables that prepare_step copied into the
// workspace; uniform steps derive rows on device.
RowMeta forward_rows(const StepDesc& step, const StepPlan& plan, Workspace ws) {
  return row_meta(step, plan, at<const int32_t>(ws, plan.workspace.row_meta_offset));
}

void* scratch_of(const StepPlan& plan, Workspace ws) {
  return plan.workspace.scratch_bytes > 0 ? at<void>(ws, plan.workspace.scratch_offset) : nullptr;
}
// The step's DeviceStatus (cuda/common/guard.h).
uint32_t* status_of(const StepPlan& plan, Workspace ws) {
  return at<uint32_t>(ws, plan.workspace.status_offset);
}
uint32_t* counters_of(const StepPlan& plan, Workspace ws) {
  return plan.workspace.counters_bytes > 0 ? at<uint32_t>(ws, plan.workspace.counters_offset)
                                           : nullptr;
}

// Padding rows n..num_output_rows of an empty step (no attention launch to
// fold the zeroing into).
void zero_padding_rows(const LayerConfig& config, const StepPlan& plan, TensorView output,
                       cudaStream_t stream) {
  launch_zero_rows(static_cast<uint16_t*>(output.data), output.stride[0], output.stride[1],
                   config.num_heads, config.head_size, plan.num_tokens, plan.num_output_rows,
                   stream);
}

void validate_layer_outputs(const LayerConfig& config, const StepPlan& plan,
                            const LayerOutputs& out, Workspace ws) {
  detail::validate_output(config, plan, out.output, kDev);
  if (out.selected.present()) {
    detail::validate_selected(config, {0, plan.num_tokens}, out.selected, kDev);
  }
  detail::validate_workspace(plan, ws);
}

// Rows [chunk) of the caller's selection, or of the workspace's.
TensorView chunk_selection(const LayerConfig& config, const StepPlan& plan, const LayerOutputs& out,
                           Workspace ws, RowRange chunk) {
  if (out.selected.present()) {
    TensorView v = out.selected;
    v.data = static_cast<int32_t*>(out.selected.data) + chunk.begin * out.selected.stride[0];
    v.shape[0] = chunk.size();
    return v;
  }
  return TensorView::contiguous(at<int32_t>(ws, plan.workspace.selected_offset), DType::i32,
                                {chunk.size(), config.num_kv_heads, config.topk}, kDev);
}

// The per-tile choice of a CSA chunk (LayerSchedule::tile_union_crossover):
// which of `tiles` run on the tile kernel, and the row kernel's list of
// the chunk's rows (-1 for a row of a running tile), in the backend scratch.
struct ChosenTiles {
  const int32_t* tile_runs = nullptr;
  const int32_t* row_list = nullptr;
};

ChosenTiles choose_tiles(const LayerConfig& config, const LayerSchedule& schedule,
                         const StepPlan& plan, const int32_t* meta, RowRange range, RowRange tiles,
                         RowRange untiled, const TensorView& selected, Workspace ws,
                         cudaStream_t stream) {
  const int64_t n = plan.num_tokens;
  auto* runs = at<int32_t>(ws, plan.workspace.scratch_offset + schedule.tile_choice_offset);
  TileChoiceParams p;
  p.selected = static_cast<const int32_t*>(selected.data);
  p.selected_row_stride = selected.stride[0];
  p.selected_group_stride = selected.stride[1];
  p.row_begin = range.begin;
  p.num_rows = range.size();
  p.num_groups = config.num_kv_heads;
  p.topk = config.topk;
  p.tiles = meta + 3 * n + 2 * tiles.begin;
  p.num_tiles = static_cast<int32_t>(tiles.size());
  p.untiled = meta + 2 * n + untiled.begin;
  p.num_untiled = untiled.size();
  p.bitmap_regions =
      static_cast<int32_t>(detail::align_up(static_cast<size_t>(plan.score_stride), 32));
  p.crossover = schedule.tile_union_crossover;
  p.tile_runs = runs;
  p.row_list = runs + tile_choice_list_offset(plan.chunk_rows) / sizeof(int32_t);
  launch_tile_choice(p, stream);
  return {p.tile_runs, p.row_list};
}

// Attention of rows `range`: with a tiled schedule, the plan's tiles
// `tiles` by the tile kernel and its untiled rows `untiled` by the row
// kernel (which also zeroes the padding rows); else every row by the row
// kernel. With a per-tile choice, a launch between the selection and the
// tile kernel first decides which tiles run as tiles; the row kernel then
// takes every other row of the range.
void attend(const LayerConfig& config, const LayerSchedule& schedule, const StepDesc& step,
            const StepPlan& plan, const RowMeta& rows, RowRange range, RowRange tiles,
            RowRange untiled, TensorView query, TensorView gate, const KVCacheView& kv,
            AttentionTarget target, Workspace ws, uint32_t* status, cudaStream_t stream) {
  if (schedule.tiled_attention) {
    // The row tables prepare_step copied (WorkspaceLayout::row_meta_offset).
    const int32_t* meta = at<const int32_t>(ws, plan.workspace.row_meta_offset);
    const int64_t n = plan.num_tokens;
    target.row_list = meta + 2 * n + untiled.begin;
    target.list_rows = untiled.size();
    if (tiles.size() > 0) {
      TileAttentionParams tp =
          tile_attention_params(config, schedule, step, rows, range, query, gate, kv, target,
                                meta + 3 * n + 2 * tiles.begin, tiles.size(), status);
      if (schedule.tile_union_crossover > 0.0f) {
        // A plain launch, which ends before the tile kernel starts. The
        // row kernel reads its list before its programmatic wait: safe
        // only because the plain tile launch sits between the two.
        const ChosenTiles chosen = choose_tiles(config, schedule, plan, meta, range, tiles, untiled,
                                                target.selected, ws, stream);
        tp.tile_runs = chosen.tile_runs;
        target.row_list = chosen.row_list;
        target.list_rows = range.size();
      }
      launch_tile_attention(tp, stream);
    }
  }
  launch_paged_attention(
      attention_params(config, schedule, step, rows, range, query, gate, kv, target, status),
      stream);
}

}  // namespace

void run_forward_csa(const DeviceInfo& device, const LayerConfig& config, const StepDesc& step,
                     const StepPlan& plan, const CsaInputs& in, const LayerCache& cache,
                     const LayerOutputs& out, Workspace ws, cudaStream_t stream) {
  const bool write_kv = !has_flag(in.flags, ForwardFlags::skip_kv_write);
  const bool summarize = !has_flag(in.flags, ForwardFlags::skip_summary_update);
  const bool zero_padding = !has_flag(in.flags, ForwardFlags::skip_padding_zero);
  // Validation: O(1) in the step's size (the plan read every id once).
  require_kind(config, LayerKind::csa, "forward_csa");
  const LayerSchedule& schedule = plan.schedule(config);
  detail::validate_step(config, step, plan, kDev);
  validate_kv(config, plan, cache.kv);
  detail::validate_summary_cache(config, cache.summaries, kDev);
  detail::validate_block_ids(config, plan, cache.summaries.num_blocks);
  if (summarize) validate_summary_state(config, plan, cache);
  if (write_kv) detail::validate_kv_inputs(config, plan, in.key, in.value, kDev);
  if (summarize) detail::validate_index_rows(config, plan, in.index_key, in.index_z, kDev);
  detail::validate_index_query(config, plan, in.index_query, in.index_weight, kDev);
  detail::validate_query(config, plan, in.query, in.gate, kDev);
  validate_layer_outputs(config, plan, out, ws);

  if (plan.num_tokens == 0) {
    if (zero_padding) zero_padding_rows(config, plan, out.output, stream);
    return;
  }
  const RowMeta rows = forward_rows(step, plan, ws);
  const int64_t G = config.num_kv_heads;
  const bool scored = schedule.indexer != IndexerPath::none;
  uint32_t* const status = status_of(plan, ws);

  // What the caller left out is launched as empty work (0 rows, 0 regions).
  const KvWriteParams kv =
      write_kv ? kv_write_params(config, step, plan, in.key, in.value, cache.kv, status)
               : KvWriteParams{};
  const SummaryParams summaries =
      summarize ? summary_params(config, step, plan, in.index_key, in.index_z, cache, status)
                : SummaryParams{};
  const bool fold = schedule.cache_update_in_select;
  if (!fold) {
    launch_cache_update(kv, summaries, config.kv_dtype, config.summary_dtype, device.sm_count,
                        stream);
  }
  for (const ScoreChunk& chunk : plan.chunks) {
    // Scores (and each row's best) only for rows with C > K: selection
    // takes every region of the others without reading scores.
    TensorView scores;
    uint32_t* row_max = nullptr;
    if (scored && chunk.columns > config.topk) {
      scores = TensorView::contiguous(at<float>(ws, plan.workspace.scores_offset), DType::f32,
                                      {chunk.rows.size(), G, plan.score_stride}, kDev);
      // Zeroed by prepare_step, cleared again by each select that reads it.
      const bool tracks_max = schedule.indexer == IndexerPath::tensor_core;
      row_max = tracks_max ? at<uint32_t>(ws, plan.workspace.row_max_offset) : nullptr;
      const ScoreTarget target{static_cast<float*>(scores.data), G * plan.score_stride,
                               plan.score_stride, chunk.columns, row_max};
      launch_indexer(indexer_params(config, schedule, step, rows, chunk.rows, in.index_query,
                                    in.index_weight, cache.summaries, target, config.topk, status),
                     schedule.indexer, config.summary_dtype, device.max_smem_per_block, stream);
    }
    const TensorView selected = chunk_selection(config, plan, out, ws, chunk.rows);
    // The ring write rides on the select launch, after the summaries above,
    // which read the old ring (or with them, when the plan folds the cache
    // update into this launch).
    SelectCacheWork cache_work;
    cache_work.ring = summarize ? &summaries : nullptr;
    cache_work.kv = fold && write_kv ? &kv : nullptr;
    cache_work.summarize = fold && summarize;
    launch_select(select_params(config, schedule, rows, chunk.rows, scores, chunk.columns, row_max,
                                selected, cache_work, status),
                  stream);

    AttentionTarget target;
    target.output = out.output;
    target.selected = selected;
    target.scratch = scratch_of(plan, ws);
    target.scratch_bytes = plan.workspace.scratch_bytes;
    target.split_arrivals = counters_of(plan, ws);
    target.zero_padding_rows = zero_padding;
    if (chunk.rows.end == plan.num_tokens && zero_padding) {
      target.pad_begin = plan.num_tokens;
      target.pad_end = plan.num_output_rows;
    }
    attend(config, schedule, step, plan, rows, chunk.rows, chunk.tiles, chunk.untiled, in.query,
           in.gate, cache.kv, target, ws, status, stream);
  }
}

void run_forward_swa(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                     const SwaInputs& in, const KVCacheView& kv, const LayerOutputs& out,
                     Workspace ws, cudaStream_t stream) {
  const bool write_kv = !has_flag(in.flags, ForwardFlags::skip_kv_write);
  const bool zero_padding = !has_flag(in.flags, ForwardFlags::skip_padding_zero);
  require_kind(config, LayerKind::swa, "forward_swa");
  const LayerSchedule& schedule = plan.schedule(config);
  detail::validate_step(config, step, plan, kDev);
  validate_kv(config, plan, kv);
  if (write_kv) detail::validate_kv_inputs(config, plan, in.key, in.value, kDev);
  detail::validate_query(config, plan, in.query, in.gate, kDev);
  validate_layer_outputs(config, plan, out, ws);

  if (plan.num_tokens == 0) {
    if (zero_padding) zero_padding_rows(config, plan, out.output, stream);
    return;
  }
  uint32_t* const status = status_of(plan, ws);
  const KvWriteParams kv_rows =
      write_kv ? kv_write_params(config, step, plan, in.key, in.value, kv, status)
               : KvWriteParams{};
  const bool fold = write_kv && schedule.kv_write_in_attention;
  if (write_kv && !fold) launch_kv_write(kv_rows, config.kv_dtype, stream);
  AttentionTarget target;
  target.kv_write = fold ? &kv_rows : nullptr;
  target.output = out.output;
  target.scratch = scratch_of(plan, ws);
  target.scratch_bytes = plan.workspace.scratch_bytes;
  target.split_arrivals = counters_of(plan, ws);
  target.zero_padding_rows = zero_padding;
  if (zero_padding) {
    target.pad_begin = plan.num_tokens;
    target.pad_end = plan.num_output_rows;
  }
  const RowRange all_tiles{0, static_cast<int64_t>(plan.row_tiles.size() / 2)};
  const RowRange all_untiled{0, static_cast<int64_t>(plan.untiled_rows.size())};
  attend(config, schedule, step, plan, forward_rows(step, plan, ws), {0, plan.num_tokens},
         all_tiles, all_untiled, in.query, in.gate, kv, target, ws, status, stream);
}

}  // namespace step5::cuda
