#include "cuda/common/smem_limit.h"

#include <cuda_runtime.h>

#include <mutex>
#include <set>
#include <utility>

#include "cuda/common/check.h"

namespace step5::cuda {

void allow_max_smem_impl(const void* kernel) {
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> raised;
  int device = 0;
  STEP5_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  if (!raised.insert({kernel, device}).second) return;
  int limit = 0;
  STEP5_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaFuncAttributes attributes{};
  STEP5_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  STEP5_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        limit - static_cast<int>(attributes.sharedSizeBytes)));
}

}  // namespace step5::cuda
