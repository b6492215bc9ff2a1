#include "core/plan.h"

#include <algorithm>

#include "core/check.h"
#include "core/validate.h"

namespace step5 {

const char* step_kind_name(StepKind kind) {
  switch (kind) {
    case StepKind::empty: return "empty";
    case StepKind::uniform: return "uniform";
    case StepKind::mixed: return "mixed";
  }
  return "?";
}

namespace {

bool same_shape(const LayerConfig& a, const LayerConfig& b) {
  return a.kind == b.kind && a.num_heads == b.num_heads && a.num_kv_heads == b.num_kv_heads &&
         a.head_size == b.head_size && a.block_size == b.block_size &&
         a.spec_tokens == b.spec_tokens &&
         (a.kind == LayerKind::swa ||
          (a.index_heads == b.index_heads && a.index_dim == b.index_dim && a.topk == b.topk));
}

}  // namespace

void StepPlan::check_layer(const LayerConfig& config) const {
  for (const auto& layer : layers) {
    if (same_shape(layer, config)) return;
  }
  detail::fail_invalid("plan: layer (", describe(config),
                       ") expected one of the shapes the plan was built for (", layers.size(),
                       " layer configs), got none matching; plan the step with this layer");
}

namespace detail {

StepPlan build_plan(const StepDesc& step, const std::vector<LayerConfig>& layers,
                    const PlanOptions& options,
                    const std::function<size_t(const StepPlan&)>& scratch_bytes) {
  require(!layers.empty(), ErrorCode::invalid_argument,
          "plan: layers expected at least one layer config, got none");
  for (const auto& layer : layers) validate_config(layer);
  const int32_t R = step.num_requests;
  const int64_t n = step.num_tokens;
  require(R >= 0, ErrorCode::invalid_argument, "step.num_requests: expected >= 0, got ", R);
  require(n >= 0, ErrorCode::invalid_argument, "step.num_tokens: expected >= 0, got ", n);
  require(n < (int64_t{1} << 31), ErrorCode::unsupported, "step.num_tokens: expected < 2^31, got ",
          n);
  require(step.num_output_rows == 0 || step.num_output_rows >= n, ErrorCode::invalid_argument,
          "step.num_output_rows: expected 0 or >= num_tokens (", n, "), got ",
          step.num_output_rows);
  const int32_t* qsl = host_query_start_loc(step);
  const int32_t* lens = host_seq_lens(step);
  require(qsl != nullptr, ErrorCode::invalid_argument,
          "step.query_start_loc: the planner needs a host copy (host_query_start_loc, or a host "
          "view), got a device view only");
  require(R == 0 || lens != nullptr, ErrorCode::invalid_argument,
          "step.seq_lens: the planner needs a host copy (host_seq_lens, or a host view), got a "
          "device view only");

  // One step has one slot mapping and one block table, so every layer it
  // serves shares the block size.
  int spec_tokens = 0;
  const int block_size = layers.front().block_size;
  for (const auto& layer : layers) {
    spec_tokens = std::max(spec_tokens, layer.spec_tokens);
    require(layer.block_size == block_size, ErrorCode::invalid_argument,
            "plan: layers expected one block_size (", block_size, "), got ", layer.block_size);
  }

  if (R > 0) {
    require(step.block_table.present() && step.block_table.rank == 2 &&
                step.block_table.dtype == DType::i32,
            ErrorCode::invalid_argument,
            "step.block_table: expected an i32 tensor [R, max_blocks], got ",
            step.block_table.present()
                ? concat(dtype_name(step.block_table.dtype), " ", shape_string(step.block_table))
                : std::string("none"));
    require(step.block_table.shape[0] >= R, ErrorCode::invalid_argument,
            "step.block_table: dim 0 expected >= num_requests (", R, "), got ",
            step.block_table.shape[0]);
  }

  StepPlan plan;
  plan.num_tokens = n;
  plan.num_output_rows = step.output_rows();
  plan.num_requests = R;
  plan.layers = layers;
  plan.max_blocks =
      step.block_table.rank == 2 ? static_cast<int32_t>(step.block_table.shape[1]) : 0;
  plan.query_start.assign(qsl, qsl + R + 1);
  if (R > 0) plan.seq_len.assign(lens, lens + R);

  require(plan.query_start[0] == 0, ErrorCode::invalid_argument,
          "step.query_start_loc[0]: expected 0, got ", plan.query_start[0]);
  require(plan.query_start[static_cast<size_t>(R)] == n, ErrorCode::invalid_argument,
          "step.query_start_loc[R=", R, "]: expected num_tokens (", n, "), got ",
          plan.query_start[static_cast<size_t>(R)]);
  bool uniform = R > 0;
  const int32_t first_len = R > 0 ? plan.query_start[1] - plan.query_start[0] : 0;
  for (int32_t r = 0; r < R; ++r) {
    const int32_t q =
        plan.query_start[static_cast<size_t>(r) + 1] - plan.query_start[static_cast<size_t>(r)];
    const int32_t len = plan.seq_len[static_cast<size_t>(r)];
    require(q >= 0, ErrorCode::invalid_argument, "step.query_start_loc: expected non-decreasing, ",
            "got [", r, "]=", plan.query_start[static_cast<size_t>(r)], " > [", r + 1,
            "]=", plan.query_start[static_cast<size_t>(r) + 1]);
    require(len >= q, ErrorCode::invalid_argument, "step.seq_lens[", r,
            "]: expected >= the request's query length (", q, "), got ", len);
    const int64_t capacity = int64_t{plan.max_blocks} * block_size;
    require(len <= capacity, ErrorCode::out_of_range, "step.seq_lens[", r,
            "]: the sequence is longer than its block table: expected <= max_blocks (",
            plan.max_blocks, ") * block_size (", block_size, ") = ", capacity, ", got ", len);
    plan.max_seq_len = std::max(plan.max_seq_len, len);
    uniform = uniform && q == first_len;
  }
  uniform = uniform && first_len >= 1 && first_len <= spec_tokens + 1;
  plan.kind = n == 0 ? StepKind::empty : uniform ? StepKind::uniform : StepKind::mixed;
  plan.query_len = uniform ? first_len : 0;

  plan.row_request.resize(static_cast<size_t>(n));
  plan.row_position.resize(static_cast<size_t>(n));
  for (int32_t r = 0; r < R; ++r) {
    const int32_t begin = plan.query_start[static_cast<size_t>(r)];
    const int32_t end = plan.query_start[static_cast<size_t>(r) + 1];
    const int32_t first_position = plan.seq_len[static_cast<size_t>(r)] - (end - begin);
    for (int32_t t = begin; t < end; ++t) {
      plan.row_request[static_cast<size_t>(t)] = r;
      plan.row_position[static_cast<size_t>(t)] = first_position + (t - begin);
      plan.max_closed = std::max(plan.max_closed, closed_regions(first_position + (t - begin)));
    }
  }

  // Scores and selection chunks (CSA layers only).
  int max_groups = 0, max_topk = 0;
  bool any_csa = false;
  for (const auto& layer : layers) {
    max_groups = std::max(max_groups, layer.num_kv_heads);
    if (layer.kind == LayerKind::csa) {
      any_csa = true;
      max_topk = std::max(max_topk, layer.topk);
    }
  }
  int64_t planned_closed = plan.max_closed;
  if (options.max_context > 0)
    planned_closed = std::max<int64_t>(planned_closed, options.max_context / 8);
  plan.score_stride = any_csa && planned_closed > 0
                          ? static_cast<int32_t>(align_up(static_cast<size_t>(planned_closed), 4))
                          : 0;
  plan.chunk_rows = std::max<int64_t>(n, 1);
  if (plan.score_stride > 0) {
    const size_t row_bytes =
        static_cast<size_t>(max_groups) * static_cast<size_t>(plan.score_stride) * 4u;
    plan.chunk_rows = std::clamp<int64_t>(static_cast<int64_t>(options.max_score_bytes / row_bytes),
                                          1, std::max<int64_t>(n, 1));
  }
  for (int64_t begin = 0; begin < n; begin += plan.chunk_rows) {
    plan.chunks.push_back({begin, std::min(n, begin + plan.chunk_rows)});
  }

  WorkspaceLayout& ws = plan.workspace;
  size_t offset = 0;
  ws.row_meta_offset = offset;
  offset = align_up(offset + 2u * static_cast<size_t>(n) * 4u, kWorkspaceAlign);
  ws.scores_offset = offset;
  if (any_csa) {
    offset =
        align_up(offset + static_cast<size_t>(plan.chunk_rows) * static_cast<size_t>(max_groups) *
                              static_cast<size_t>(plan.score_stride) * 4u,
                 kWorkspaceAlign);
  }
  ws.selected_offset = offset;
  if (any_csa) {
    offset =
        align_up(offset + static_cast<size_t>(plan.chunk_rows) * static_cast<size_t>(max_groups) *
                              static_cast<size_t>(max_topk) * 4u,
                 kWorkspaceAlign);
  }
  ws.scratch_offset = offset;
  ws.scratch_bytes = scratch_bytes ? scratch_bytes(plan) : 0;
  ws.total_bytes = align_up(offset + ws.scratch_bytes, kWorkspaceAlign);

  // Block table and slot mapping, where the host can see them.
  const int32_t* table = host_block_table(step);
  const int64_t* slots = host_slot_mapping(step);
  if (table != nullptr && slots != nullptr && n > 0) {
    const int64_t table_stride = step.block_table.stride[0];
    {
      const int32_t B = block_size;
      for (int64_t t = 0; t < n; ++t) {
        const int32_t r = plan.row_request[static_cast<size_t>(t)];
        const int32_t p = plan.row_position[static_cast<size_t>(t)];
        const int64_t block = table[r * table_stride + p / B];
        const int64_t want = block * B + p % B;
        require(slots[t] == want, ErrorCode::invalid_argument, "step.slot_mapping[", t,
                "]: expected block_table[", r, "][", p / B, "] * ", B, " + ", p % B, " = ", want,
                " for position ", p, " of request ", r, ", got ", slots[t]);
      }
    }
  }
  return plan;
}

}  // namespace detail
}  // namespace step5
