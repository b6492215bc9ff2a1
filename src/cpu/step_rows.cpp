#include "cpu/step_rows.h"

#include <algorithm>

#include "core/check.h"

namespace step5::cpu {

namespace {

using detail::require;
constexpr ErrorCode kBad = ErrorCode::invalid_argument;

const int32_t* i32(const TensorView& v) {
  return static_cast<const int32_t*>(v.data);
}

// Live requests of a uniform step as the views hold them now: the first
// ones have query_len rows each, the rest none (padding). Returns how many
// rows are live.
int64_t uniform_live_rows(const StepPlan& plan, const int32_t* qsl) {
  const int32_t q = plan.query_len;
  require(qsl[0] == 0, kBad, "step.query_start_loc[0] (read at run time): expected 0, got ",
          qsl[0]);
  bool padding = false;
  for (int32_t r = 0; r < plan.num_requests; ++r) {
    const int32_t rows = qsl[r + 1] - qsl[r];
    const bool ok = rows == 0 || (rows == q && !padding);
    require(ok, kBad, "step.query_start_loc (read at run time): the uniform plan expected ", q,
            " rows per request, and 0 only after the last request with rows (padding), got ", rows,
            " rows for request ", r);
    padding = padding || rows == 0;
  }
  const int32_t live = qsl[plan.num_requests];
  require(live <= plan.num_tokens, kBad,
          "step.query_start_loc[R] (read at run time): expected <= the planned num_tokens (",
          plan.num_tokens, "), got ", live);
  return live;
}

}  // namespace

bool rows_from_views(const StepPlan& plan) {
  return plan.kind == StepKind::uniform || plan.seq_lens_upper_bound;
}

StepRows step_rows(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                   int32_t* table) {
  StepRows rows;
  const int64_t n = plan.num_tokens;
  if (!rows_from_views(plan)) {
    rows.query_start = plan.query_start.data();
    rows.seq_len = plan.seq_len.data();
    rows.row_request = plan.row_request.data();
    rows.row_position = plan.row_position.data();
    rows.live_rows = n;
    return rows;
  }
  const int32_t R = plan.num_requests;
  const int32_t* qsl = i32(step.query_start_loc);
  const int32_t* lens = R > 0 ? i32(step.seq_lens) : nullptr;
  if (plan.kind == StepKind::uniform) {
    rows.live_rows = uniform_live_rows(plan, qsl);
  } else {
    // Upper-bound steps keep query_start_loc exact on the host.
    for (int32_t r = 0; r <= R; ++r) {
      require(qsl[r] == plan.query_start[static_cast<size_t>(r)], kBad, "step.query_start_loc[", r,
              "] (read at run time): expected the planned ",
              plan.query_start[static_cast<size_t>(r)],
              " (only seq_lens may differ from the host copies), got ", qsl[r]);
    }
    rows.live_rows = n;
  }
  const int64_t table_capacity = int64_t{plan.max_blocks} * config.block_size;
  int32_t* request = table;
  int32_t* position = table + n;
  for (int32_t r = 0; r < R; ++r) {
    const int32_t begin = qsl[r];
    const int32_t q = qsl[r + 1] - begin;
    if (q == 0) continue;
    const auto i = static_cast<size_t>(r);
    const int64_t bound = std::min<int64_t>(
        table_capacity, plan.seq_lens_upper_bound ? plan.seq_len[i] : plan.context_capacity);
    require(lens[r] >= q && lens[r] <= bound, kBad, "step.seq_lens[", r,
            "] (read at run time): expected ", q, " (its query rows) .. ", bound,
            plan.seq_lens_upper_bound ? " (the host's upper bound)"
                                      : " (the plan's context capacity and block table)",
            ", got ", lens[r]);
    for (int32_t k = 0; k < q; ++k) {
      request[begin + k] = r;
      position[begin + k] = lens[r] - q + k;
    }
  }
  for (int64_t t = rows.live_rows; t < n; ++t) {
    request[t] = -1;
    position[t] = 0;
  }
  rows.query_start = qsl;
  rows.seq_len = lens;
  rows.row_request = request;
  rows.row_position = position;
  return rows;
}

void check_live_ids(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                    const StepRows& rows, int64_t num_blocks, int64_t ring_entries) {
  if (!rows_from_views(plan)) return;
  const int32_t B = config.block_size;
  const int32_t* table = i32(step.block_table);
  const int32_t* rings = step.ring_index.present() ? i32(step.ring_index) : nullptr;
  for (int32_t r = 0; r < plan.num_requests; ++r) {
    if (rows.query_start[r + 1] == rows.query_start[r]) continue;
    const int64_t used = (int64_t{rows.seq_len[r]} + B - 1) / B;
    for (int64_t b = 0; b < used; ++b) {
      const int32_t id = table[r * step.block_table.stride[0] + b];
      require(id >= 0 && id < num_blocks, ErrorCode::out_of_range, "step.block_table[", r, "][", b,
              "] (read at run time): block id expected 0..", num_blocks - 1, ", got ", id);
    }
    if (ring_entries > 0 && rings != nullptr) {
      require(rings[r] >= 0 && rings[r] < ring_entries, ErrorCode::out_of_range, "step.ring_index[",
              r, "] (read at run time): expected 0..", ring_entries - 1, ", got ", rings[r]);
    }
  }
  const auto* slots = static_cast<const int64_t*>(step.slot_mapping.data);
  for (int64_t t = 0; t < rows.live_rows; ++t) {
    require(slots[t] < num_blocks * B, ErrorCode::out_of_range, "step.slot_mapping[", t,
            "] (read at run time): slot expected < ", num_blocks * B, ", got ", slots[t]);
  }
}

}  // namespace step5::cpu
