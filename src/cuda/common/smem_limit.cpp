#include "cuda/common/smem_limit.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <utility>

#include "cuda/common/check.h"

namespace step5::cuda {

size_t allow_max_smem_impl(const void* kernel) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, size_t> raised;  // dynamic bytes allowed
  int device = 0;
  STEP5_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  const auto found = raised.find({kernel, device});
  if (found != raised.end()) return found->second;
  int limit = 0;
  STEP5_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaFuncAttributes attributes{};
  STEP5_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  const int dynamic = limit - static_cast<int>(attributes.sharedSizeBytes);
  STEP5_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic));
  raised[{kernel, device}] = static_cast<size_t>(dynamic);
  return static_cast<size_t>(dynamic);
}

}  // namespace step5::cuda
