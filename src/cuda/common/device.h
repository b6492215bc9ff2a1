// Device selection and the capability check: which GPU, whether this build
// can run on it, and which kernel set it takes (common/arch.h). Anything the
// backend cannot run on is refused up front with an Error naming the GPU
// that was found and what is supported.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "cuda/common/arch.h"
#include "step5/attention.h"

namespace step5::cuda {

struct DeviceInfo {
  int device_id = 0;
  std::string name;
  int major = 0;
  int minor = 0;
  int sm_count = 0;
  size_t max_smem_per_block = 0;  // opt-in limit (cudaFuncSetAttribute)
  KernelPath path = KernelPath::portable;
  // Clusters of 2^k CTAs of the cluster selection this device runs at once,
  // k = 1..3 ([0] unused; 0: none, e.g. before sm_90 or where its list does
  // not fit). Set by the cuda backend (select_active_clusters_on_device).
  int select_active_clusters[4] = {0, 0, 0, 0};
};

// Whether this build holds sm_90a code (STEP5_CUDA_ARCHS has 90a).
bool built_with_sm90a();
// The build's CUDA targets, as configured (STEP5_CUDA_ARCHS), for messages.
const char* built_cuda_archs();

// Throws Error(unsupported) when there is no CUDA device, `device_id` is
// past the device count, the device's compute capability is below 8.0 or
// this build has no code it can run. Makes `device_id` current.
DeviceInfo require_device(int device_id, CudaKernels kernels);

// Whether require_device would succeed; never throws and leaves the
// caller's current device as it was. `why` says what was found when it
// returns false.
bool device_available(int device_id, std::string* why);

inline cudaStream_t to_cuda_stream(Stream stream) {
  return static_cast<cudaStream_t>(stream);
}

// Makes `device_id` current for the calling thread and checks it.
void set_device(int device_id);

// cudaSuccess when the current device can run this build's kernels, else
// the error a launch would give (no kernel image for the device).
cudaError_t kernel_image_status();

}  // namespace step5::cuda
