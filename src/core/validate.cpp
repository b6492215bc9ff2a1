#include "core/validate.h"

#include <algorithm>

#include "core/check.h"
#include "core/plan.h"

namespace step5::detail {

namespace {

constexpr ErrorCode kBad = ErrorCode::invalid_argument;

template <class T>
const T* host_view(const T* explicit_copy, const TensorView& view) {
  if (explicit_copy != nullptr) return explicit_copy;
  if (view.present() && view.device == Device::host) return static_cast<const T*>(view.data);
  return nullptr;
}

void check_device(const char* what, Device got, Device want) {
  require(got == want, kBad, what, ": device expected ", device_name(want), ", got ",
          device_name(got));
}

}  // namespace

const int32_t* host_query_start_loc(const StepDesc& s) {
  return host_view(s.host_query_start_loc, s.query_start_loc);
}
const int32_t* host_seq_lens(const StepDesc& s) {
  return host_view(s.host_seq_lens, s.seq_lens);
}
const int32_t* host_block_table(const StepDesc& s) {
  return host_view(s.host_block_table, s.block_table);
}
const int64_t* host_slot_mapping(const StepDesc& s) {
  return host_view(s.host_slot_mapping, s.slot_mapping);
}
const int32_t* host_ring_index(const StepDesc& s) {
  return host_view(s.host_ring_index, s.ring_index);
}

void validate_step(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                   Device device) {
  validate_config(config);
  plan.check_layer(config);
  require(step.num_tokens == plan.num_tokens && step.num_requests == plan.num_requests, kBad,
          "step: expected the step the plan was built for (n=", plan.num_tokens,
          ", R=", plan.num_requests, "), got n=", step.num_tokens, ", R=", step.num_requests);
  require(step.output_rows() == plan.num_output_rows, kBad,
          "step.num_output_rows: expected the planned ", plan.num_output_rows, ", got ",
          step.output_rows());
  const int64_t R = plan.num_requests;
  check_tensor(step.query_start_loc, {"step.query_start_loc", DType::i32, device, {R + 1}});
  if (R == 0) return;
  check_tensor(step.seq_lens, {"step.seq_lens", DType::i32, device, {R}});
  check_tensor(step.block_table, {"step.block_table", DType::i32, device, {R, plan.max_blocks}});
  if (plan.num_tokens > 0) {
    check_tensor(step.slot_mapping, {"step.slot_mapping", DType::i64, device, {plan.num_tokens}});
  }
  if (config.kind == LayerKind::csa) {
    check_tensor(step.ring_index, {"step.ring_index", DType::i32, device, {R}});
  }
}

void validate_kv_cache(const LayerConfig& c, const KVCacheView& kv, Device device) {
  require(kv.data != nullptr, kBad, "kv cache: data expected non-null, got null");
  check_device("kv cache", kv.device, device);
  require(kv.dtype == c.kv_dtype, kBad, "kv cache: dtype expected config.kv_dtype (",
          dtype_name(c.kv_dtype), "), got ", dtype_name(kv.dtype));
  require(kv.num_blocks >= 1, kBad, "kv cache: num_blocks expected >= 1, got ", kv.num_blocks);
  const auto elem = static_cast<int64_t>(dtype_size(c.kv_dtype));
  const int64_t row = 2 * c.head_size * elem;
  require(kv.token_stride >= row && kv.token_stride % 16 == 0, kBad,
          "kv cache: token_stride expected a multiple of 16 >= 2*D*", elem, " = ", row,
          " bytes, got ", kv.token_stride);
  require(kv.head_stride >= 0 && kv.head_stride % 16 == 0, kBad,
          "kv cache: head_stride expected a non-negative multiple of 16 bytes, got ",
          kv.head_stride);
  require(kv.block_stride > 0 && kv.block_stride % 16 == 0, kBad,
          "kv cache: block_stride expected a positive multiple of 16 bytes, got ", kv.block_stride);
  require(c.num_kv_heads == 1 || kv.head_stride >= row, kBad,
          "kv cache: head_stride expected >= one K||V row (", row, " bytes) with ", c.num_kv_heads,
          " KV heads, got ", kv.head_stride);
}

void validate_summary_cache(const LayerConfig& c, const SummaryCacheView& s, Device device) {
  require(s.data != nullptr, kBad, "summary cache: data expected non-null, got null");
  check_device("summary cache", s.device, device);
  require(s.dtype == c.summary_dtype, kBad, "summary cache: dtype expected config.summary_dtype (",
          dtype_name(c.summary_dtype), "), got ", dtype_name(s.dtype));
  require(s.num_blocks >= 1, kBad, "summary cache: num_blocks expected >= 1, got ", s.num_blocks);
  const int64_t row = c.index_dim * static_cast<int64_t>(dtype_size(c.summary_dtype));
  require(s.region_stride >= row && s.region_stride % 16 == 0, kBad,
          "summary cache: region_stride expected a multiple of 16 >= Di*",
          dtype_size(c.summary_dtype), " = ", row, " bytes, got ", s.region_stride);
  require(s.block_stride > 0 && s.block_stride % 16 == 0, kBad,
          "summary cache: block_stride expected a positive multiple of 16 bytes, got ",
          s.block_stride);
}

void validate_ring(const LayerConfig& c, const RingView& ring, Device device) {
  require(ring.data != nullptr, kBad, "ring: data expected non-null, got null");
  check_device("ring", ring.device, device);
  require(ring.num_entries >= 1, kBad, "ring: num_entries expected >= 1, got ", ring.num_entries);
  const auto need = static_cast<int64_t>(ring_entry_bytes(c));
  require(ring.entry_stride >= need && ring.entry_stride % 16 == 0, kBad,
          "ring: entry_stride expected a multiple of 16 >= ring_entry_bytes (", need,
          " bytes for capacity ", c.ring_capacity(), "), got ", ring.entry_stride);
}

void validate_block_ids(const LayerConfig& c, const StepPlan& plan, int64_t num_blocks) {
  const StepPlan::IdMax& id = plan.max_block_id;
  require(id.value < num_blocks, ErrorCode::out_of_range, "step.block_table[", id.index, "][",
          id.entry, "]: block id expected 0..", num_blocks - 1, " (cache num_blocks), got ",
          id.value);
  const StepPlan::IdMax& slot = plan.max_slot;
  const int64_t limit = num_blocks * c.block_size;
  require(slot.value < limit, ErrorCode::out_of_range, "step.slot_mapping[", slot.index,
          "]: slot expected 0..", limit - 1, " (num_blocks * block_size), got ", slot.value);
}

void validate_ring_ids(const StepPlan& plan, int64_t num_entries) {
  const StepPlan::IdMax& ring = plan.max_ring_index;
  require(ring.value < num_entries, ErrorCode::out_of_range, "step.ring_index[", ring.index,
          "]: expected 0..", num_entries - 1, " (ring num_entries), got ", ring.value);
}

void validate_kv_inputs(const LayerConfig& c, const StepPlan& plan, const TensorView& key,
                        const TensorView& value, Device device) {
  const int64_t n = plan.num_tokens;
  check_tensor(key, {"key", DType::bf16, device, {n, c.num_kv_heads, c.head_size}});
  check_tensor(value, {"value", DType::bf16, device, {n, c.num_kv_heads, c.head_size}});
}

void validate_index_rows(const LayerConfig& c, const StepPlan& plan, const TensorView& index_key,
                         const TensorView& index_z, Device device) {
  const int64_t n = plan.num_tokens;
  check_tensor(index_key, {"index_key", DType::bf16, device, {n, c.index_dim}});
  check_tensor(index_z, {"index_z", DType::f32, device, {n}});
}

void validate_index_query(const LayerConfig& c, const StepPlan& plan, const TensorView& index_query,
                          const TensorView& index_weight, Device device) {
  const int64_t n = plan.num_tokens;
  check_tensor(
      index_query,
      {"index_query", DType::bf16, device, {n, c.num_kv_heads, c.index_heads, c.index_dim}});
  check_tensor(index_weight,
               {"index_weight", DType::f32, device, {n, c.num_kv_heads, c.index_heads}});
}

void validate_query(const LayerConfig& c, const StepPlan& plan, const TensorView& query,
                    const TensorView& gate, Device device) {
  const int64_t n = plan.num_tokens;
  check_tensor(query, {"query", DType::bf16, device, {n, c.num_heads, c.head_size}});
  check_tensor(gate, {"gate", DType::bf16, device, {n, c.num_heads}, /*optional=*/true});
}

void validate_rows(const StepPlan& plan, RowRange rows) {
  require(rows.begin >= 0 && rows.begin <= rows.end && rows.end <= plan.num_tokens, kBad,
          "rows: expected 0 <= begin <= end <= num_tokens (", plan.num_tokens, "), got [",
          rows.begin, ", ", rows.end, ")");
}

void validate_scores(const LayerConfig& c, const StepPlan& plan, RowRange rows,
                     const TensorView& scores, bool optional, Device device) {
  int32_t closed = 0;
  for (int64_t t = rows.begin; t < rows.end; ++t) {
    closed = std::max(closed, closed_regions(plan.row_position[static_cast<size_t>(t)]));
  }
  if (optional && closed <= c.topk && !scores.present()) return;
  check_tensor(scores, {"scores",
                        DType::f32,
                        device,
                        {rows.size(), c.num_kv_heads, -1},
                        false,
                        /*min_rows=*/false});
  require(scores.shape[2] >= closed, kBad, "scores: dim 2 expected >= the rows' closed regions (",
          closed, "), got ", scores.shape[2]);
}

void validate_selected(const LayerConfig& c, RowRange rows, const TensorView& selected,
                       Device device) {
  check_tensor(selected, {"selected",
                          DType::i32,
                          device,
                          {rows.size(), c.num_kv_heads, c.topk},
                          false,
                          /*min_rows=*/false});
}

void validate_output(const LayerConfig& c, const StepPlan& plan, const TensorView& output,
                     Device device) {
  check_tensor(output, {"output",
                        DType::bf16,
                        device,
                        {plan.num_output_rows, c.num_heads, c.head_size},
                        false,
                        false});
}

void validate_workspace(const StepPlan& plan, const Workspace& workspace) {
  require(workspace.bytes >= plan.workspace_bytes(), kBad,
          "workspace: bytes expected >= ", plan.workspace_bytes(),
          " (plan.workspace_bytes()), got ", workspace.bytes);
  require(plan.workspace_bytes() == 0 || workspace.data != nullptr, kBad,
          "workspace: data expected non-null, got null");
  require(reinterpret_cast<uintptr_t>(workspace.data) % kWorkspaceAlign == 0, kBad,
          "workspace: data expected ", kWorkspaceAlign, "-byte aligned, got address ",
          workspace.data);
}

}  // namespace step5::detail
