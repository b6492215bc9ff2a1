// A kernel that exists only to ask the driver whether this build holds code
// for the current device: every CUDA file of the library is compiled for
// the same targets (STEP5_CUDA_ARCHS), so the answer for this one is the
// answer for all.
#include "cuda/common/device.h"

namespace step5::cuda {

__global__ void image_probe_kernel() {}

cudaError_t kernel_image_status() {
  cudaFuncAttributes attributes{};
  const cudaError_t status = cudaFuncGetAttributes(&attributes, image_probe_kernel);
  if (status != cudaSuccess) cudaGetLastError();  // not sticky: clear it for later calls
  return status;
}

}  // namespace step5::cuda
