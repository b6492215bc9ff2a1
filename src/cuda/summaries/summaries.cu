#include <algorithm>

#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/heuristics.h"
#include "cuda/summaries/summaries.cuh"

namespace step5::cuda {

namespace {
constexpr int32_t kMaxGridY = 65535;  // CUDA's limit on gridDim.y
}  // namespace

void launch_summaries(const SummaryParams& params, DType summary_dtype, cudaStream_t stream) {
  if (params.num_requests == 0 || params.max_closing == 0) return;
  const dim3 grid(static_cast<unsigned>(params.num_requests),
                  static_cast<unsigned>(std::min(params.max_closing, kMaxGridY)));
  dispatch_storage(summary_dtype, "summary_dtype", [&](auto tag) {
    summaries_kernel<decltype(tag)><<<grid, summary_threads(), 0, stream>>>(params);
  });
  check_launch("summaries_kernel");
}

void launch_ring_write(const SummaryParams& params, cudaStream_t stream) {
  if (params.num_requests == 0) return;
  const dim3 grid(static_cast<unsigned>(params.num_requests),
                  static_cast<unsigned>(params.ring_capacity));
  ring_write_kernel<<<grid, ring_threads(), 0, stream>>>(params);
  check_launch("ring_write_kernel");
}

}  // namespace step5::cuda
