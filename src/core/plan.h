// Host planning shared by every backend: reads the step's host metadata
// once, checks it, and lays out the caller's workspace.
#pragma once

#include <cstddef>
#include <functional>

#include "step5/step.h"

namespace step5::detail {

// `scratch_bytes` gives the backend-private scratch for a plan whose other
// fields are filled; it may be empty (no scratch).
StepPlan build_plan(const StepDesc& step, const std::vector<LayerConfig>& layers,
                    const PlanOptions& options,
                    const std::function<size_t(const StepPlan&)>& scratch_bytes);

// Closed regions of a row at position p (SPEC 3).
inline int32_t closed_regions(int32_t position) {
  return position / 8;
}

constexpr size_t kWorkspaceAlign = 256;
inline size_t align_up(size_t x, size_t a) {
  return (x + a - 1) / a * a;
}

}  // namespace step5::detail
