// The workspace layout of a plan, and the static bound an engine allocates
// before its first step: both lay out the same regions in the same order
// through lay_out(), so the bound only has to bound each region's size.
#include <algorithm>
#include <limits>

#include "core/check.h"
#include "core/plan.h"

namespace step5::detail {

namespace {

constexpr ErrorCode kBad = ErrorCode::invalid_argument;

// The largest scores region any plan within the limits lays out. A plan's
// stride s (a multiple of 4) is at most smax = align4(max_context / 8), and
// its chunk has clamp(M / (G s 4), 1, n) rows (M = max_score_bytes): the
// region is at most min(n G s 4, M) when one row fits in M, else one row of
// G s 4 bytes.
size_t scores_bound(const WorkspaceShape& shape, const StepLimits& limits, size_t max_score_bytes) {
  if (!shape.any_csa) return 0;
  const size_t stride = align_up(static_cast<size_t>(limits.max_context / kRegionSize), 4);
  const size_t row = shape.groups * stride * 4u;
  const size_t rows = static_cast<size_t>(std::max<int64_t>(limits.max_tokens, 1));
  return std::max(std::min(rows * row, max_score_bytes), row);
}

}  // namespace

WorkspaceLayout lay_out(const WorkspaceSizes& sizes) {
  WorkspaceLayout ws;
  size_t offset = 0;
  auto region = [&offset](size_t bytes) {
    const size_t at = offset;
    offset = align_up(offset + bytes, kWorkspaceAlign);
    return at;
  };
  ws.row_meta_offset = region(sizes.row_meta);
  ws.scores_offset = region(sizes.scores);
  // The device status word sits right before row_max: prepare_step zeroes
  // status, row_max and selected with one memset.
  ws.status_offset = region(sizeof(DeviceStatus));
  ws.row_max_offset = region(sizes.row_max);
  ws.selected_offset = region(sizes.selected);
  ws.counters_offset = region(sizes.counters);
  ws.counters_bytes = sizes.counters;
  ws.scratch_offset = offset;
  ws.scratch_bytes = sizes.scratch;
  ws.total_bytes = align_up(offset + sizes.scratch, kWorkspaceAlign);
  return ws;
}

WorkspaceShape workspace_shape(const std::vector<LayerConfig>& layers) {
  WorkspaceShape shape;
  for (const LayerConfig& layer : layers) {
    shape.groups = std::max(shape.groups, static_cast<size_t>(layer.num_kv_heads));
    if (layer.kind == LayerKind::csa) {
      shape.any_csa = true;
      shape.topk = std::max(shape.topk, static_cast<size_t>(layer.topk));
    }
  }
  return shape;
}

size_t workspace_bound(const std::vector<LayerConfig>& layers, const StepLimits& limits,
                       const PlanOptions& options, const BackendBound& backend_bytes) {
  require(!layers.empty(), kBad,
          "workspace_bytes: layers expected at least one layer config, got none");
  for (const LayerConfig& layer : layers) validate_config(layer);
  require(limits.max_tokens >= 0 && limits.max_tokens < (int64_t{1} << 31), kBad,
          "workspace_bytes: limits.max_tokens expected 0..2^31-1, got ", limits.max_tokens);
  require(limits.max_requests >= 0, kBad,
          "workspace_bytes: limits.max_requests expected >= 0, got ", limits.max_requests);
  require(limits.max_context >= 0 && limits.max_context <= std::numeric_limits<int32_t>::max(),
          kBad, "workspace_bytes: limits.max_context expected 0..2^31-1 tokens, got ",
          limits.max_context);
  require(options.max_context <= limits.max_context, kBad,
          "workspace_bytes: options.max_context expected <= limits.max_context (",
          limits.max_context, "), got ", options.max_context);
  require(options.max_score_bytes > 0, kBad,
          "workspace_bytes: options.max_score_bytes expected > 0, got 0");

  const WorkspaceShape shape = workspace_shape(layers);
  const size_t rows = static_cast<size_t>(std::max<int64_t>(limits.max_tokens, 1));
  WorkspaceSizes sizes;
  sizes.row_meta = 5u * static_cast<size_t>(limits.max_tokens) * 4u;
  if (shape.any_csa) {
    sizes.scores = scores_bound(shape, limits, options.max_score_bytes);
    sizes.row_max = rows * shape.groups * 4u;
    sizes.selected = rows * shape.groups * shape.topk * 4u;
  }
  for (const LayerConfig& layer : layers) {
    const BackendBytes b = backend_bytes(layer, limits, options);
    sizes.counters = std::max(sizes.counters, b.counters);
    sizes.scratch = std::max(sizes.scratch, b.scratch);
  }
  return lay_out(sizes).total_bytes;
}

}  // namespace step5::detail
