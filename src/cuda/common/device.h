// Device selection and the capability check: the kernels are built for
// sm_90a only, so anything but a compute capability 9.x GPU is refused up
// front with an Error naming the GPU that was found.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "step5/attention.h"

namespace step5::cuda {

struct DeviceInfo {
  int device_id = 0;
  std::string name;
  int major = 0;
  int minor = 0;
  int sm_count = 0;
  size_t max_smem_per_block = 0;  // opt-in limit (cudaFuncSetAttribute)
};

// Throws Error(unsupported) when there is no CUDA device, `device_id` is
// past the device count, or the device is not compute capability 9.x.
DeviceInfo require_hopper(int device_id);

// Whether a usable Hopper GPU is present; never throws. `why` says what
// was found when it returns false.
bool hopper_available(int device_id, std::string* why);

inline cudaStream_t to_cuda_stream(Stream stream) {
  return static_cast<cudaStream_t>(stream);
}

// Makes `device_id` current for the calling thread and checks it.
void set_device(int device_id);

}  // namespace step5::cuda
