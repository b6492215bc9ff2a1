#include "cuda/forward.h"

#include <algorithm>

#include "core/check.h"
#include "core/plan.h"
#include "core/validate.h"
#include "cuda/attention/launch.h"
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

// Padding rows n..num_output_rows of an empty step (no attention launch to
// fold the zeroing into).
void zero_padding(const LayerConfig& config, const StepPlan& plan, TensorView output,
                  cudaStream_t stream) {
  launch_zero_rows(static_cast<uint16_t*>(output.data), output.stride[0], output.stride[1],
                   config.num_heads, config.head_size, plan.num_tokens, plan.num_output_rows,
                   stream);
}

// Columns the chunk's scores must cover and whether any row needs them.
// Uniform steps may replay in a CUDA graph with longer contexts than at
// planning, so they use the planned capacity (PlanOptions::max_context);
// mixed steps use the chunk's own rows.
int32_t score_columns(const StepPlan& plan, RowRange rows) {
  if (plan.kind == StepKind::uniform) return plan.score_stride;
  int32_t closed = 0;
  for (int64_t t = rows.begin; t < rows.end; ++t) {
    closed = std::max(closed, detail::closed_regions(plan.row_position[static_cast<size_t>(t)]));
  }
  return closed;
}

void validate_layer_outputs(const LayerConfig& config, const StepPlan& plan,
                            const LayerOutputs& out, Workspace ws) {
  detail::validate_output(config, plan, out.output, kDev);
  if (out.selected.present()) {
    detail::validate_selected(config, {0, plan.num_tokens}, out.selected, kDev);
  }
  detail::validate_workspace(plan, ws);
}

}  // namespace

void run_forward_csa(const DeviceInfo& device, const LayerConfig& config, const StepDesc& step,
                     const StepPlan& plan, const CsaInputs& in, const LayerCache& cache,
                     const LayerOutputs& out, Workspace ws, cudaStream_t stream) {
  require_kind(config, LayerKind::csa, "forward_csa");
  detail::validate_step(config, step, plan, kDev);
  detail::validate_kv_cache(config, cache.kv, kDev);
  detail::validate_block_ids(config, step, plan,
                             std::min(cache.kv.num_blocks, cache.summaries.num_blocks));
  detail::validate_kv_inputs(config, plan, in.key, in.value, kDev);
  validate_summary_update(config, step, plan, in.index_key, in.index_z, cache);
  detail::validate_index_query(config, plan, in.index_query, in.index_weight, kDev);
  detail::validate_query(config, plan, in.query, in.gate, kDev);
  validate_layer_outputs(config, plan, out, ws);

  if (plan.num_tokens == 0) {
    zero_padding(config, plan, out.output, stream);
    return;
  }
  launch_kv_write(kv_write_params(config, step, in.key, in.value, cache.kv), config.kv_dtype,
                  stream);
  run_summaries(config, step, plan, in.index_key, in.index_z, cache, stream);

  const RowMeta rows = forward_rows(step, plan, ws);
  const int64_t G = config.num_kv_heads;
  const int64_t K = config.topk;
  for (const RowRange& chunk : plan.chunks) {
    const int32_t columns = score_columns(plan, chunk);
    // Selection reads scores only for rows with C > K.
    TensorView scores;
    if (columns > config.topk) {
      IndexerParams ip = indexer_params(config, step, rows, chunk, in.index_query, in.index_weight,
                                        cache.summaries);
      ip.scores = at<float>(ws, plan.workspace.scores_offset);
      ip.scores_stride_g = plan.score_stride;
      ip.scores_stride_t = G * plan.score_stride;
      ip.columns = columns;
      ip.skip_topk = config.topk;
      ip.fill_tail = false;
      launch_indexer(ip, config.summary_dtype, device.max_smem_per_block, stream);
      scores =
          TensorView::contiguous(ip.scores, DType::f32, {chunk.size(), G, plan.score_stride}, kDev);
    }
    // Select straight into the caller's selection when asked for one, so
    // no copy is needed; otherwise into the workspace.
    TensorView selected;
    if (out.selected.present()) {
      selected = out.selected;
      selected.data =
          static_cast<int32_t*>(out.selected.data) + chunk.begin * out.selected.stride[0];
      selected.shape[0] = chunk.size();
    } else {
      selected = TensorView::contiguous(at<int32_t>(ws, plan.workspace.selected_offset), DType::i32,
                                        {chunk.size(), G, K}, kDev);
    }
    launch_select(select_params(config, rows, chunk, scores, selected), stream);

    PagedAttentionParams ap =
        attention_params(config, step, rows, chunk, in.query, in.gate, cache.kv, out.output);
    set_selected(ap, selected);
    ap.scratch =
        plan.workspace.scratch_bytes > 0 ? at<void>(ws, plan.workspace.scratch_offset) : nullptr;
    ap.scratch_bytes = plan.workspace.scratch_bytes;
    if (chunk.end == plan.num_tokens) {
      ap.pad_row_begin = plan.num_tokens;
      ap.pad_row_end = plan.num_output_rows;
    }
    launch_paged_attention(ap, stream);
  }
}

void run_forward_swa(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                     const SwaInputs& in, const KVCacheView& kv, const LayerOutputs& out,
                     Workspace ws, cudaStream_t stream) {
  require_kind(config, LayerKind::swa, "forward_swa");
  detail::validate_step(config, step, plan, kDev);
  detail::validate_kv_cache(config, kv, kDev);
  detail::validate_block_ids(config, step, plan, kv.num_blocks);
  detail::validate_kv_inputs(config, plan, in.key, in.value, kDev);
  detail::validate_query(config, plan, in.query, in.gate, kDev);
  validate_layer_outputs(config, plan, out, ws);

  if (plan.num_tokens == 0) {
    zero_padding(config, plan, out.output, stream);
    return;
  }
  launch_kv_write(kv_write_params(config, step, in.key, in.value, kv), config.kv_dtype, stream);
  PagedAttentionParams ap =
      attention_params(config, step, forward_rows(step, plan, ws), {0, plan.num_tokens}, in.query,
                       in.gate, kv, out.output);
  ap.scratch =
      plan.workspace.scratch_bytes > 0 ? at<void>(ws, plan.workspace.scratch_offset) : nullptr;
  ap.scratch_bytes = plan.workspace.scratch_bytes;
  ap.pad_row_begin = plan.num_tokens;
  ap.pad_row_end = plan.num_output_rows;
  launch_paged_attention(ap, stream);
}

}  // namespace step5::cuda
