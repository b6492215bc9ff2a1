#include "attention_step.h"

#include <nanobind/nanobind.h>

#include <algorithm>
#include <string>

#include "errors.h"

namespace step5::python {

namespace {

// Workspace views must be 256-byte aligned; a caller's buffer is used from
// its first aligned byte on.
constexpr uintptr_t kWorkspaceAlign = 256;

unsigned char* align_up(unsigned char* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  return p + ((kWorkspaceAlign - address % kWorkspaceAlign) % kWorkspaceAlign);
}

// The library's kernels run without the GIL so other Python threads (an
// engine's scheduler) keep going while a cpu forward computes.
using Unlocked = nb::gil_scoped_release;

}  // namespace

AttentionStep::AttentionStep(std::shared_ptr<BackendHandle> backend,
                             std::vector<LayerConfig> layers)
    : backend_(std::move(backend)), layers_(std::move(layers)) {
  if (!backend_ || !backend_->backend) fail_argument("backend: expected a Backend, got None");
  if (layers_.empty()) fail_argument("layers: expected at least one LayerConfig, got none");
  for (const LayerConfig& layer : layers_) validate_config(layer);
}

const StepPlan& AttentionStep::step_plan() const {
  if (!planned_) {
    fail_argument(
        "plan: expected plan(...) to have been called for this step, got an "
        "unplanned wrapper");
  }
  return plan_;
}

void AttentionStep::plan(StepArrays arrays, const StepOptions& options,
                         std::optional<OutArray> workspace, uintptr_t stream) {
  const Placement& at = where();
  StepDesc desc;
  desc.query_start_loc = input_view(arrays.query_start_loc, "query_start_loc", DType::i32, at);
  desc.seq_lens = input_view(arrays.seq_lens, "seq_lens", DType::i32, at);
  desc.block_table = input_view(arrays.block_table, "block_table", DType::i32, at);
  desc.slot_mapping = input_view(arrays.slot_mapping, "slot_mapping", DType::i64, at);
  desc.ring_index = optional_input(arrays.ring_index, "ring_index", DType::i32, at);
  if (desc.seq_lens.rank != 1) {
    fail_argument("seq_lens: expected a 1-D array [R], got " + std::to_string(desc.seq_lens.rank) +
                  " dimensions");
  }
  desc.num_requests = static_cast<int32_t>(desc.seq_lens.shape[0]);
  desc.host_query_start_loc = static_cast<const int32_t*>(host_copy(
      arrays.query_start_loc_cpu, "query_start_loc_cpu", DType::i32, desc.query_start_loc.numel()));
  desc.host_seq_lens = static_cast<const int32_t*>(
      host_copy(arrays.seq_lens_cpu, "seq_lens_cpu", DType::i32, desc.seq_lens.numel()));
  desc.host_slot_mapping = static_cast<const int64_t*>(host_copy(
      arrays.slot_mapping_cpu, "slot_mapping_cpu", DType::i64, desc.slot_mapping.numel()));
  desc.host_ring_index = static_cast<const int32_t*>(
      host_copy(arrays.ring_index_cpu, "ring_index_cpu", DType::i32, desc.ring_index.numel()));
  // The planner reads the host block table with the device table's row
  // stride, so the copy must be a dense [R, max_blocks] of the same shape.
  if (arrays.block_table_cpu) {
    if (desc.block_table.rank != 2 || desc.block_table.stride[0] != desc.block_table.shape[1]) {
      fail_argument(
          "block_table_cpu: expected block_table to be a dense [R, max_blocks] array "
          "when a host copy is given, got a strided or non 2-D block_table");
    }
    desc.host_block_table = static_cast<const int32_t*>(
        host_copy(arrays.block_table_cpu, "block_table_cpu", DType::i32, desc.block_table.numel()));
  }

  // n is what query_start_loc ends with, read from the host copy (or the
  // array itself when it is in host memory).
  const int32_t* qsl = desc.host_query_start_loc;
  if (qsl == nullptr && at.device == Device::host) qsl = desc.query_start_loc.as<const int32_t>();
  if (qsl == nullptr) {
    fail_argument(
        "query_start_loc_cpu: expected a host copy of query_start_loc for the cuda "
        "backend (the planner reads it without a device sync), got None");
  }
  if (desc.query_start_loc.rank != 1 || desc.query_start_loc.shape[0] != desc.num_requests + 1) {
    fail_argument("query_start_loc: expected a 1-D array [R+1] = [" +
                  std::to_string(desc.num_requests + 1) + "] (R from seq_lens), got " +
                  std::to_string(desc.query_start_loc.numel()) + " elements");
  }
  desc.num_tokens = qsl[desc.num_requests];
  desc.num_output_rows = options.num_output_rows;
  desc.seq_lens_upper_bound = options.seq_lens_upper_bound;

  PlanOptions plan_options;
  plan_options.max_context = options.max_context;
  if (options.max_score_bytes) plan_options.max_score_bytes = *options.max_score_bytes;
  plan_options.tile_attention = options.tile_attention;
  StepPlan plan = backend_->backend->plan(desc, layers_, plan_options);

  const size_t need = plan.workspace_bytes();
  Workspace ws;
  std::vector<unsigned char> host_workspace;
  if (workspace) {
    const ByteSpan bytes = byte_span(*workspace, "workspace", at);
    unsigned char* aligned = align_up(static_cast<unsigned char*>(bytes.data));
    const auto skipped = static_cast<size_t>(aligned - static_cast<unsigned char*>(bytes.data));
    const size_t usable = bytes.bytes - std::min(bytes.bytes, skipped);
    if (usable < need) {
      fail_argument("workspace: expected >= " + std::to_string(need) +
                    " bytes after 256-byte alignment (plan.workspace_bytes), got " +
                    std::to_string(usable) + " of " + std::to_string(bytes.bytes));
    }
    ws = Workspace{aligned, usable};
  } else if (at.device == Device::host) {
    // The wrapper's own host buffer, kept across steps while large enough.
    if (host_workspace_.size() < need + kWorkspaceAlign) {
      host_workspace.resize(need + kWorkspaceAlign);
    }
    unsigned char* base = host_workspace.empty() ? host_workspace_.data() : host_workspace.data();
    ws = Workspace{align_up(base), need};
  } else {
    fail_argument("workspace: expected a caller-provided device buffer of >= " +
                  std::to_string(need) + " bytes for the cuda backend, got None");
  }
  {
    Unlocked unlocked;
    backend_->backend->prepare_step(plan, ws, to_stream(stream));
  }

  // Everything checked and prepared: the new step replaces the old one.
  desc_ = desc;
  plan_ = std::move(plan);
  workspace_ = ws;
  arrays_ = std::move(arrays);
  workspace_array_ = std::move(workspace);
  if (!host_workspace.empty()) host_workspace_ = std::move(host_workspace);
  planned_ = true;
}

RowRange AttentionStep::row_range(const Rows& rows) const {
  const StepPlan& plan = step_plan();
  if (!rows) return RowRange{0, plan.num_tokens};
  return RowRange{rows->first, rows->second};
}

void AttentionStep::forward_csa(
    const LayerConfig& config, const InArray& query, const std::optional<InArray>& key,
    const std::optional<InArray>& value, const InArray& index_query, const InArray& index_weight,
    const std::optional<InArray>& index_key, const std::optional<InArray>& index_z,
    const OutArray& kv_cache, const std::optional<OutArray>& ring, const OutArray& out,
    const std::optional<InArray>& gate, const std::optional<OutArray>& selected, uint32_t flags,
    uintptr_t stream) {
  (void)step_plan();  // not planned: say so before looking at the arrays
  run_csa(config, query, key, value, index_query, index_weight, index_key, index_z,
          layer_cache(config, kv_cache, ring, where()), out, gate, selected, flags, stream);
}

void AttentionStep::forward_csa_bound(
    const LayerConfig& config, const InArray& query, const std::optional<InArray>& key,
    const std::optional<InArray>& value, const InArray& index_query, const InArray& index_weight,
    const std::optional<InArray>& index_key, const std::optional<InArray>& index_z,
    const BoundCache& cache, const OutArray& out, const std::optional<InArray>& gate,
    const std::optional<OutArray>& selected, uint32_t flags, uintptr_t stream) {
  run_csa(config, query, key, value, index_query, index_weight, index_key, index_z, cache.cache,
          out, gate, selected, flags, stream);
}

void AttentionStep::run_csa(const LayerConfig& config, const InArray& query,
                            const std::optional<InArray>& key, const std::optional<InArray>& value,
                            const InArray& index_query, const InArray& index_weight,
                            const std::optional<InArray>& index_key,
                            const std::optional<InArray>& index_z, const LayerCache& cache,
                            const OutArray& out, const std::optional<InArray>& gate,
                            const std::optional<OutArray>& selected, uint32_t flags,
                            uintptr_t stream) {
  const StepPlan& plan = step_plan();
  const Placement& at = where();
  CsaInputs in;
  in.query = input_view(query, "query", DType::bf16, at);
  in.key = optional_input(key, "key", DType::bf16, at);
  in.value = optional_input(value, "value", DType::bf16, at);
  in.index_query = input_view(index_query, "index_query", DType::bf16, at);
  in.index_weight = input_view(index_weight, "index_weight", DType::f32, at);
  in.index_key = optional_input(index_key, "index_key", DType::bf16, at);
  in.index_z = optional_input(index_z, "index_z", DType::f32, at);
  in.gate = optional_input(gate, "gate", DType::bf16, at);
  in.flags = static_cast<ForwardFlags>(flags);
  LayerOutputs outs;
  outs.output = output_view(out, "out", DType::bf16, at);
  outs.selected = optional_output(selected, "selected", DType::i32, at);
  Unlocked unlocked;
  backend_->backend->forward_csa(config, desc_, plan, in, cache, outs, workspace_,
                                 to_stream(stream));
}

void AttentionStep::forward_swa(const LayerConfig& config, const InArray& query,
                                const std::optional<InArray>& key,
                                const std::optional<InArray>& value, const OutArray& kv_cache,
                                const OutArray& out, const std::optional<InArray>& gate,
                                uint32_t flags, uintptr_t stream) {
  (void)step_plan();
  run_swa(config, query, key, value, layer_cache(config, kv_cache, std::nullopt, where()).kv, out,
          gate, flags, stream);
}

void AttentionStep::forward_swa_bound(const LayerConfig& config, const InArray& query,
                                      const std::optional<InArray>& key,
                                      const std::optional<InArray>& value, const BoundCache& cache,
                                      const OutArray& out, const std::optional<InArray>& gate,
                                      uint32_t flags, uintptr_t stream) {
  run_swa(config, query, key, value, cache.cache.kv, out, gate, flags, stream);
}

void AttentionStep::run_swa(const LayerConfig& config, const InArray& query,
                            const std::optional<InArray>& key, const std::optional<InArray>& value,
                            const KVCacheView& kv, const OutArray& out,
                            const std::optional<InArray>& gate, uint32_t flags, uintptr_t stream) {
  const StepPlan& plan = step_plan();
  const Placement& at = where();
  SwaInputs in;
  in.query = input_view(query, "query", DType::bf16, at);
  in.key = optional_input(key, "key", DType::bf16, at);
  in.value = optional_input(value, "value", DType::bf16, at);
  in.gate = optional_input(gate, "gate", DType::bf16, at);
  in.flags = static_cast<ForwardFlags>(flags);
  LayerOutputs outs;
  outs.output = output_view(out, "out", DType::bf16, at);
  Unlocked unlocked;
  backend_->backend->forward_swa(config, desc_, plan, in, kv, outs, workspace_, to_stream(stream));
}

BoundCache AttentionStep::bind_cache(const LayerConfig& config, const OutArray& kv_cache,
                                     const std::optional<OutArray>& ring) const {
  validate_config(config);
  BoundCache bound{kv_cache, ring, layer_cache(config, kv_cache, ring, where())};
  return bound;
}

void AttentionStep::write_kv(const LayerConfig& config, const InArray& key, const InArray& value,
                             const OutArray& kv_cache, uintptr_t stream) {
  const StepPlan& plan = step_plan();
  const Placement& at = where();
  const TensorView k = input_view(key, "key", DType::bf16, at);
  const TensorView v = input_view(value, "value", DType::bf16, at);
  const LayerCache cache = layer_cache(config, kv_cache, std::nullopt, at);
  Unlocked unlocked;
  backend_->backend->write_kv(config, desc_, plan, k, v, cache.kv, to_stream(stream));
}

void AttentionStep::update_summaries(const LayerConfig& config, const InArray& index_key,
                                     const InArray& index_z, const OutArray& kv_cache,
                                     const OutArray& ring, uintptr_t stream) {
  const StepPlan& plan = step_plan();
  const Placement& at = where();
  const TensorView ik = input_view(index_key, "index_key", DType::bf16, at);
  const TensorView iz = input_view(index_z, "index_z", DType::f32, at);
  const LayerCache cache = layer_cache(config, kv_cache, ring, at);
  Unlocked unlocked;
  backend_->backend->update_summaries(config, desc_, plan, ik, iz, cache, to_stream(stream));
}

void AttentionStep::indexer_scores(const LayerConfig& config, const InArray& index_query,
                                   const InArray& index_weight, const OutArray& kv_cache,
                                   const OutArray& scores, const Rows& rows, uintptr_t stream) {
  const StepPlan& plan = step_plan();
  const Placement& at = where();
  const RowRange range = row_range(rows);
  const TensorView iq = input_view(index_query, "index_query", DType::bf16, at);
  const TensorView iw = input_view(index_weight, "index_weight", DType::f32, at);
  const TensorView s = output_view(scores, "scores", DType::f32, at);
  const LayerCache cache = layer_cache(config, kv_cache, std::nullopt, at);
  Unlocked unlocked;
  backend_->backend->indexer_scores(config, desc_, plan, range, iq, iw, cache.summaries, s,
                                    to_stream(stream));
}

void AttentionStep::select_regions(const LayerConfig& config, const std::optional<InArray>& scores,
                                   const OutArray& selected, const Rows& rows, uintptr_t stream) {
  const StepPlan& plan = step_plan();
  const Placement& at = where();
  const RowRange range = row_range(rows);
  const TensorView s = optional_input(scores, "scores", DType::f32, at);
  const TensorView sel = output_view(selected, "selected", DType::i32, at);
  Unlocked unlocked;
  backend_->backend->select_regions(config, desc_, plan, range, s, sel, to_stream(stream));
}

void AttentionStep::sparse_attention(const LayerConfig& config, const InArray& query,
                                     const InArray& selected, const OutArray& kv_cache,
                                     const OutArray& out, const std::optional<InArray>& gate,
                                     const Rows& rows, uintptr_t stream) {
  const StepPlan& plan = step_plan();
  const Placement& at = where();
  const RowRange range = row_range(rows);
  const TensorView q = input_view(query, "query", DType::bf16, at);
  const TensorView sel = input_view(selected, "selected", DType::i32, at);
  const TensorView g = optional_input(gate, "gate", DType::bf16, at);
  const TensorView o = output_view(out, "out", DType::bf16, at);
  const LayerCache cache = layer_cache(config, kv_cache, std::nullopt, at);
  Unlocked unlocked;
  backend_->backend->sparse_attention(config, desc_, plan, range, q, sel, g, cache.kv, o,
                                      to_stream(stream));
}

void AttentionStep::window_attention(const LayerConfig& config, const InArray& query,
                                     const OutArray& kv_cache, const OutArray& out,
                                     const std::optional<InArray>& gate, uintptr_t stream) {
  const StepPlan& plan = step_plan();
  const Placement& at = where();
  const TensorView q = input_view(query, "query", DType::bf16, at);
  const TensorView g = optional_input(gate, "gate", DType::bf16, at);
  const TensorView o = output_view(out, "out", DType::bf16, at);
  const LayerCache cache = layer_cache(config, kv_cache, std::nullopt, at);
  Unlocked unlocked;
  backend_->backend->window_attention(config, desc_, plan, q, g, cache.kv, o, to_stream(stream));
}

}  // namespace step5::python
