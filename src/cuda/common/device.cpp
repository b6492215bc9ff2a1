#include "cuda/common/device.h"

#include "core/check.h"
#include "cuda/common/check.h"

namespace step5::cuda {

namespace {

// Returns an empty string when the device is usable, else the reason.
std::string probe(int device_id, DeviceInfo* info) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return detail::concat("no usable CUDA device (cudaGetDeviceCount: ", cudaGetErrorName(status),
                          ", ", cudaGetErrorString(status), ")");
  }
  if (count == 0) return "no CUDA device";
  if (device_id < 0 || device_id >= count) {
    return detail::concat("device_id ", device_id, " with ", count, " CUDA device(s) present");
  }
  cudaDeviceProp props{};
  STEP5_CUDA_CHECK(cudaGetDeviceProperties(&props, device_id));
  if (props.major != 9) {
    return detail::concat("GPU ", device_id, " '", props.name, "' of compute capability ",
                          props.major, ".", props.minor);
  }
  if (info != nullptr) {
    info->device_id = device_id;
    info->name = props.name;
    info->major = props.major;
    info->minor = props.minor;
    info->sm_count = props.multiProcessorCount;
    info->max_smem_per_block = props.sharedMemPerBlockOptin;
  }
  return {};
}

}  // namespace

DeviceInfo require_hopper(int device_id) {
  DeviceInfo info;
  const std::string why = probe(device_id, &info);
  detail::require(why.empty(), ErrorCode::unsupported,
                  "cuda backend: expected a Hopper GPU (compute capability 9.x, sm_90a build), "
                  "got ",
                  why);
  return info;
}

bool hopper_available(int device_id, std::string* why) {
  try {
    const std::string reason = probe(device_id, nullptr);
    if (why != nullptr) *why = reason;
    return reason.empty();
  } catch (const Error& error) {
    if (why != nullptr) *why = error.what();
    return false;
  }
}

void set_device(int device_id) {
  STEP5_CUDA_CHECK(cudaSetDevice(device_id));
}

}  // namespace step5::cuda
