// Each row's request and position as the cpu kernels use them. For exact
// steps these are the plan's. Uniform steps and steps planned from upper
// bounds take them from the step's views when the operation runs, as the
// cuda kernels read device memory: a uniform plan then serves new lengths
// and fewer live requests (CUDA-graph replays, padding requests), and an
// upper-bound plan the exact lengths. The cpu backend checks those view
// contents against the plan's bounds (the contract the cuda backend cannot
// check without a sync), so a violation is an Error here, not garbage.
#pragma once

#include <cstdint>
#include <vector>

#include "step5/attention.h"

namespace step5::cpu {

struct StepRows {
  const int32_t* query_start = nullptr;   // [R+1]
  const int32_t* seq_len = nullptr;       // [R]
  const int32_t* row_request = nullptr;   // [n]; -1 for a padding row
  const int32_t* row_position = nullptr;  // [n]; 0 for a padding row
  int64_t live_rows = 0;                  // rows [live_rows, n) are padding rows
};

// Whether the rows come from the views (uniform or upper-bound plans).
bool rows_from_views(const StepPlan& plan);

// The rows of `step` under `plan`. `table` (i32 [2, n]) receives the view-
// derived rows when rows_from_views(plan); it is unused otherwise.
StepRows step_rows(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                   int32_t* table);

// View-derived steps only (no-op otherwise): every block id, slot and ring
// entry the live requests use, against the caches' sizes. The plan checked
// the values it saw; these are the values at run time.
void check_live_ids(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                    const StepRows& rows, int64_t num_blocks, int64_t ring_entries);

}  // namespace step5::cpu
