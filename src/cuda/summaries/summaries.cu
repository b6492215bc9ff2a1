#include <algorithm>

#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/heuristics.h"
#include "cuda/summaries/summaries.cuh"

namespace step5::cuda {

namespace {

constexpr int32_t kMaxGridY = 65535;  // CUDA's limit on gridDim.y

// One warp per (request, ring row): row i of the request's last
// m = min(query_len, capacity) rows goes to slot position % capacity.
__global__ void ring_write_kernel(SummaryParams p) {
  const int r = blockIdx.x;
  const int32_t begin = __ldg(p.query_start_loc + r);
  const int32_t qlen = __ldg(p.query_start_loc + r + 1) - begin;
  const int32_t m = min(qlen, p.ring_capacity);
  const int i = blockIdx.y;
  if (i >= m) return;
  const int64_t t = begin + qlen - m + i;
  const int32_t position = __ldg(p.seq_lens + r) - m + i;
  write_ring_row(p, r, t, position, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
}

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
