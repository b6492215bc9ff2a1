// The cache side of a CSA forward in one launch: CTAs [0, kv_ctas) write
// the step's K/V rows (kv_write), the others summarize the regions the step
// closes, one warp per (request, closing region). Both read only the step's
// inputs and the ring as it was before the step; the ring itself is written
// later in the forward (by the select launch), so every summary sees the
// old ring.
#pragma once

#include "cuda/heuristics.h"
#include "cuda/kv_write/kv_write.cuh"
#include "cuda/summaries/summaries.cuh"

namespace step5::cuda {

// Summary k (0-based among the regions it closes in this step) of request
// r, by one warp, when the request's inputs are usable and it closes that
// many regions.
template <class SummaryStorage>
__device__ __forceinline__ void summarize_closing(const SummaryParams& sp, int r, int32_t k,
                                                  int lane) {
  const int32_t begin = __ldg(sp.query_start_loc + r);
  const int32_t seq_len = __ldg(sp.seq_lens + r);
  const int32_t qlen = __ldg(sp.query_start_loc + r + 1) - begin;
  const int32_t start = seq_len - qlen;
  if (!request_ok(sp, r, begin, qlen, seq_len, lane == 0 && k == 0)) return;
  const int32_t region = start / 8 + k;
  if (region < seq_len / 8) summarize_region<SummaryStorage>(sp, r, begin, start, region, lane);
}

template <class KvStorage, class SummaryStorage>
__global__ void __launch_bounds__(cache_update_threads())
    cache_update_kernel(const KvWriteParams kv, const SummaryParams sp, int kv_ctas) {
  if (static_cast<int>(blockIdx.x) < kv_ctas) {
    write_kv_rows<KvStorage>(kv, blockIdx.x * int64_t{blockDim.x} + threadIdx.x,
                             int64_t{kv_ctas} * blockDim.x);
    return;
  }
  constexpr int kWarps = cache_update_threads() / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t warps = int64_t{gridDim.x - kv_ctas} * kWarps;
  const int64_t items = int64_t{sp.num_requests} * sp.max_closing;
  for (int64_t item = (blockIdx.x - kv_ctas) * int64_t{kWarps} + threadIdx.x / 32; item < items;
       item += warps) {
    summarize_closing<SummaryStorage>(sp, static_cast<int>(item / sp.max_closing),
                                      static_cast<int32_t>(item % sp.max_closing), lane);
  }
}

}  // namespace step5::cuda
