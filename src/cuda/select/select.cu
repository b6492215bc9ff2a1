#include <algorithm>

#include "core/check.h"
#include "cuda/common/check.h"
#include "cuda/common/programmatic.cuh"
#include "cuda/common/smem_limit.h"
#include "cuda/select/cluster_rows.cuh"
#include "cuda/select/select.cuh"
#include "cuda/select/staged_rows.cuh"

namespace step5::cuda {

namespace {
constexpr int32_t kMaxGridY = 65535;  // CUDA's limit on gridDim.y

// The summaries the launch carries (SelectParams::summarize), one warp each.
int64_t summary_items(const SelectParams& params) {
  return params.summarize ? int64_t{params.ring.num_requests} * params.ring.max_closing : 0;
}

// One CTA of kThreads per (row, group) and, past the rows, the summaries
// folded into the launch, one warp per (request, closing region); `smem`
// bytes of dynamic shared memory (`what` names them in the error).
template <int kThreads, class Kernel>
void launch_row_ctas(Kernel* kernel, size_t smem, const char* what, const char* name,
                     const SelectParams& params, cudaStream_t stream) {
  const int64_t summaries = summary_items(params);
  const int64_t per_column = int64_t{params.num_groups} * (kThreads / 32);
  const dim3 grid(
      static_cast<unsigned>(params.num_rows + (summaries + per_column - 1) / per_column),
      static_cast<unsigned>(params.num_groups));
  const size_t allowed = allow_max_smem(kernel);
  detail::require(smem <= allowed, ErrorCode::unsupported, "cuda backend select: ", what,
                  " of <= ", allowed, " bytes of shared memory expected on this GPU, got ", smem);
  STEP5_CUDA_CHECK(launch_kernel(kernel, grid, dim3(kThreads), smem, stream,
                                 params.programmatic_launch, params));
  check_launch(name);
}

template <int kThreads, bool kLongRows>
void launch_with(const SelectParams& params, cudaStream_t stream) {
  const size_t smem =
      static_cast<size_t>(select_list_capacity(params.columns, params.short_columns, kLongRows)) *
      8u;
  launch_row_ctas<kThreads>(select_kernel<kThreads, kLongRows>, smem, "a list", "select_kernel",
                            params, stream);
}

// Rows split over clusters of params.cluster_parts CTAs (cluster_rows.cuh):
// CTA x of a row's cluster is blockIdx.x = row * parts + x; the summaries,
// one warp each, take the grid's first CTAs, with whole clusters past the
// rows only when the rows' CTAs have too few warps.
void launch_in_clusters(const SelectParams& params, cudaStream_t stream) {
  constexpr int kThreads = select_wide_threads();
  const int parts = params.cluster_parts;
  detail::require(parts >= 2 && parts <= select_cluster_max_parts() && (parts & (parts - 1)) == 0,
                  ErrorCode::invalid_argument,
                  "cuda backend select: cluster_parts expected a power of two in 2..",
                  select_cluster_max_parts(), ", got ", parts);
  const int64_t summaries = summary_items(params);
  const int64_t per_cluster_column = int64_t{params.num_groups} * parts * (kThreads / 32);
  const int64_t cluster_columns =
      std::max<int64_t>(params.num_rows, (summaries + per_cluster_column - 1) / per_cluster_column);
  const dim3 grid(static_cast<unsigned>(cluster_columns * parts),
                  static_cast<unsigned>(params.num_groups));
  auto* kernel = select_cluster_kernel<kThreads>;
  const size_t smem = static_cast<size_t>(select_cluster_capacity()) * 8u;
  const size_t allowed = allow_max_smem(kernel);
  detail::require(smem <= allowed, ErrorCode::unsupported,
                  "cuda backend select: a part's list of <= ", allowed,
                  " bytes of shared memory expected on this GPU, got ", smem);
  STEP5_CUDA_CHECK(launch_kernel_in_clusters(kernel, grid, dim3(kThreads), smem, stream,
                                             params.programmatic_launch,
                                             static_cast<unsigned>(parts), params));
  check_launch("select_cluster_kernel");
}

// Rows staged in shared memory (staged_rows.cuh).
void launch_staged(const SelectParams& params, cudaStream_t stream) {
  constexpr int kThreads = select_staged_threads();
  launch_row_ctas<kThreads>(select_staged_kernel<kThreads>, select_staged_smem(params.columns),
                            "a staged row", "select_staged_kernel", params, stream);
}

// Rows past the short columns: the long-row instance or the two-pass one.
template <int kThreads>
void launch_rows(const SelectParams& params, bool long_rows, cudaStream_t stream) {
  if (long_rows) {
    launch_with<kThreads, true>(params, stream);
  } else {
    launch_with<kThreads, false>(params, stream);
  }
}
}  // namespace

void set_select_active_clusters(DeviceInfo& device) {
  constexpr int kThreads = select_wide_threads();
  static_assert(select_cluster_max_parts() == 8, "select_active_clusters holds sizes 2, 4, 8");
  for (int& active : device.select_active_clusters) active = 0;
  if (device.major < 9 || !select_cluster_fits(device.max_smem_per_block)) return;
  auto* kernel = select_cluster_kernel<kThreads>;
  cudaFuncAttributes attributes{};
  STEP5_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  if (attributes.ptxVersion < 90) return;
  const size_t smem = static_cast<size_t>(select_cluster_capacity()) * 8u;
  if (allow_max_smem(kernel) < smem) return;
  for (int k = 1; k <= 3; ++k) {
    const int parts = 1 << k;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(parts));
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = smem;
    cudaLaunchAttribute attribute[1] = {cluster_attribute(static_cast<unsigned>(parts))};
    config.attrs = attribute;
    config.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) == cudaSuccess) {
      device.select_active_clusters[k] = clusters;
    } else {
      (void)cudaGetLastError();  // a size this device cannot hold is no error here
    }
  }
}

void launch_select(const SelectParams& params, cudaStream_t stream) {
  if (params.num_rows == 0) return;
  detail::require(params.num_groups <= kMaxGridY, ErrorCode::unsupported,
                  "cuda backend select: num_kv_heads expected <= ", kMaxGridY, ", got ",
                  params.num_groups);
  // The one switch from the plan's score columns to an instance.
  detail::require(params.short_columns >= select_short_columns() &&
                      params.short_columns <= select_many_short_columns(),
                  ErrorCode::invalid_argument, "cuda backend select: short_columns expected ",
                  select_short_columns(), "..", select_many_short_columns(), ", got ",
                  params.short_columns);
  const bool long_rows = params.long_rows && params.columns > select_long_columns();
  if (params.columns <= params.short_columns) {
    launch_with<select_short_threads(), false>(params, stream);
  } else if (params.columns <= params.staged_columns) {
    launch_staged(params, stream);
  } else if (params.cluster_parts > 1 && params.columns >= select_cluster_min_columns()) {
    launch_in_clusters(params, stream);
  } else if (params.wide) {
    launch_rows<select_wide_threads()>(params, long_rows, stream);
  } else {
    launch_rows<select_threads()>(params, long_rows, stream);
  }
}

}  // namespace step5::cuda
