#include <algorithm>

#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/summaries/cache_update.cuh"
#include "cuda/summaries/launch.h"

namespace step5::cuda {

void launch_cache_update(const KvWriteParams& kv, const SummaryParams& sp, DType kv_dtype,
                         DType summary_dtype, int sm_count, cudaStream_t stream) {
  const int64_t vectors = kv.num_tokens * kv.num_heads * (2 * kv.head_size / 8);
  const int64_t summaries = int64_t{sp.num_requests} * sp.max_closing;
  if (vectors == 0 && summaries == 0) return;
  // K/V vectors one per thread up to a few waves; summaries one per warp,
  // the rest of the grid (both loops stride, so caps only bound the grid).
  const int threads = cache_update_threads();
  const int64_t cap = int64_t{sm_count} * 16;
  const int kv_ctas = static_cast<int>(
      std::clamp<int64_t>((vectors + threads - 1) / threads, vectors > 0 ? 1 : 0, cap));
  const int sum_ctas = static_cast<int>(
      std::clamp<int64_t>((summaries + threads / 32 - 1) / (threads / 32), 0, cap));
  dispatch_storage(kv_dtype, "kv_dtype", [&](auto kv_tag) {
    dispatch_storage(summary_dtype, "summary_dtype", [&](auto sum_tag) {
      cache_update_kernel<decltype(kv_tag), decltype(sum_tag)>
          <<<static_cast<unsigned>(kv_ctas + sum_ctas), threads, 0, stream>>>(kv, sp, kv_ctas);
    });
  });
  check_launch("cache_update_kernel");
}

}  // namespace step5::cuda
