#include "core/check.h"
#include "cuda/common/check.h"
#include "cuda/common/programmatic.cuh"
#include "cuda/common/smem_limit.h"
#include "cuda/select/select.cuh"

namespace step5::cuda {

namespace {
constexpr int32_t kMaxGridY = 65535;  // CUDA's limit on gridDim.y

template <int kThreads, bool kLongRows>
void launch_with(const SelectParams& params, cudaStream_t stream) {
  // Summaries folded into the launch take CTAs past the rows, one warp per
  // (request, closing region).
  const int64_t summaries =
      params.summarize ? int64_t{params.ring.num_requests} * params.ring.max_closing : 0;
  const int64_t per_column = int64_t{params.num_groups} * (kThreads / 32);
  const dim3 grid(
      static_cast<unsigned>(params.num_rows + (summaries + per_column - 1) / per_column),
      static_cast<unsigned>(params.num_groups));
  auto* kernel = select_kernel<kThreads, kLongRows>;
  const size_t smem =
      static_cast<size_t>(select_list_capacity(params.columns, params.short_columns, kLongRows)) *
      8u;
  const size_t allowed = allow_max_smem(kernel);
  detail::require(smem <= allowed, ErrorCode::unsupported,
                  "cuda backend select: a list of <= ", allowed,
                  " bytes of shared memory expected on this GPU, got ", smem);
  STEP5_CUDA_CHECK(launch_kernel(kernel, grid, dim3(kThreads), smem, stream,
                                 params.programmatic_launch, params));
  check_launch("select_kernel");
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
  } else if (params.wide) {
    launch_rows<select_wide_threads()>(params, long_rows, stream);
  } else {
    launch_rows<select_threads()>(params, long_rows, stream);
  }
}

}  // namespace step5::cuda
