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

// Row tiles of mixed steps (StepPlan::row_tiles): 16 rows, the cuda tile
// kernel's M side of 16 rows x H/G heads over H/G warps. Requests with fewer
// than 8 query rows stay with the row kernel, whose split-KV keeps the SMs
// busy on short queries; from 8 rows a tile reads each shared page once
// instead of once per row. (The threshold is an estimate, not a measured
// crossover.)
constexpr int32_t kTileRows = 16;
constexpr int32_t kTileMinRows = 8;

constexpr size_t kWorkspaceAlign = 256;
inline size_t align_up(size_t x, size_t a) {
  return (x + a - 1) / a * a;
}

// Bytes of each workspace region (before alignment). A plan's layout and
// the static bound both go through lay_out(), whose total only grows when a
// region grows, so region-wise maxima bound every plan.
struct WorkspaceSizes {
  size_t row_meta = 0;  // i32 [5 n] (WorkspaceLayout::row_meta_offset)
  size_t scores = 0;    // f32 [chunk_rows, G, score_stride]
  size_t row_max = 0;   // u32 [chunk_rows, G]
  size_t selected = 0;  // i32 [chunk_rows, G, K]
  size_t counters = 0;  // backend counters
  size_t scratch = 0;   // backend scratch
};
WorkspaceLayout lay_out(const WorkspaceSizes& sizes);

// What the layers of a plan share in the workspace: the widest G and K.
struct WorkspaceShape {
  bool any_csa = false;
  size_t groups = 0;
  size_t topk = 0;
};
WorkspaceShape workspace_shape(const std::vector<LayerConfig>& layers);

// The backend's most scratch and counters for one layer over every plan
// within `limits` (rows up to limits.max_tokens, contexts up to
// limits.max_context).
struct BackendBytes {
  size_t scratch = 0;
  size_t counters = 0;
};
using BackendBound =
    std::function<BackendBytes(const LayerConfig&, const StepLimits&, const PlanOptions&)>;

// Backend::workspace_bytes: validates the layers, limits and options, then
// the largest size of every region under those limits.
size_t workspace_bound(const std::vector<LayerConfig>& layers, const StepLimits& limits,
                       const PlanOptions& options, const BackendBound& backend_bytes);

}  // namespace step5::detail
