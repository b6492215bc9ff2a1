#include "cuda/common/device.h"

#include "core/check.h"
#include "cuda/common/check.h"

// Set by CMake from STEP5_CUDA_ARCHS (step5_cuda_flags).
#ifndef STEP5_CUDA_SM90A
#error "STEP5_CUDA_SM90A must be defined by the build (0 or 1)"
#endif
#ifndef STEP5_CUDA_ARCHS
#error "STEP5_CUDA_ARCHS must be defined by the build"
#endif

namespace step5::cuda {

namespace {

// Returns an empty string when the device exists and its compute
// capability is supported, else the reason; fills `info` (path included).
std::string probe(int device_id, CudaKernels kernels, DeviceInfo& info) {
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
  const std::string problem = capability_problem(props.major, props.minor);
  if (!problem.empty()) {
    return detail::concat("GPU ", device_id, " '", props.name, "': ", problem);
  }
  info.device_id = device_id;
  info.name = props.name;
  info.major = props.major;
  info.minor = props.minor;
  info.sm_count = props.multiProcessorCount;
  info.max_smem_per_block = props.sharedMemPerBlockOptin;
  info.path = select_kernel_path(props.major, props.minor, built_with_sm90a(), kernels);
  return {};
}

// Empty when the current device runs this build's code, else why not.
std::string image_problem(const DeviceInfo& info) {
  const cudaError_t status = kernel_image_status();
  if (status == cudaSuccess) return {};
  return detail::concat("GPU ", info.device_id, " '", info.name, "' of compute capability ",
                        info.major, ".", info.minor, " has no code in this build (built for ",
                        built_cuda_archs(), ": configure STEP5_CUDA_ARCHS with a target for it, ",
                        "e.g. 80-virtual; ", cudaGetErrorName(status), ")");
}

}  // namespace

bool built_with_sm90a() {
  return STEP5_CUDA_SM90A != 0;
}

const char* built_cuda_archs() {
  return STEP5_CUDA_ARCHS;
}

DeviceInfo require_device(int device_id, CudaKernels kernels) {
  DeviceInfo info;
  const std::string why = probe(device_id, kernels, info);
  detail::require(why.empty(), ErrorCode::unsupported, "cuda backend: expected ", supported_gpus(),
                  ", got ", why);
  set_device(device_id);
  const std::string missing = image_problem(info);
  detail::require(missing.empty(), ErrorCode::unsupported, "cuda backend: ", missing);
  return info;
}

bool device_available(int device_id, std::string* why) {
  try {
    DeviceInfo info;
    std::string reason = probe(device_id, CudaKernels::automatic, info);
    if (reason.empty()) {
      // The image check runs on the device's context: make it current for
      // the check only.
      int previous = 0;
      STEP5_CUDA_CHECK(cudaGetDevice(&previous));
      set_device(device_id);
      reason = image_problem(info);
      set_device(previous);
    }
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
