// Host planning shared by every backend: checks the step's views, reads the
// step's host metadata once, checks it, and lays out the caller's workspace.
// The backend contributes the per-layer schedule (its kernels' launch
// shapes and scratch), so forwards only execute what the plan decided.
#pragma once

#include <cstddef>
#include <functional>

#include "step5/step.h"

namespace step5::detail {

// Fills the schedule of one layer of a plan whose step-level fields (rows,
// chunks, maxima) are set. `scratch_bytes` is the backend scratch it needs.
using Scheduler = std::function<LayerSchedule(const StepPlan&, const LayerConfig&)>;

StepPlan build_plan(const StepDesc& step, const std::vector<LayerConfig>& layers,
                    const PlanOptions& options, int sm_count, const Scheduler& scheduler);

// Closed regions of a row at position p (SPEC 3).
inline int32_t closed_regions(int32_t position) {
  return position / 8;
}

constexpr size_t kWorkspaceAlign = 256;
inline size_t align_up(size_t x, size_t a) {
  return (x + a - 1) / a * a;
}

}  // namespace step5::detail
