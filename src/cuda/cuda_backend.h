// The CUDA backend (compute capability >= 8.0; Hopper's sm_90a kernels where
// they exist, the portable kernels elsewhere): every SPEC operation as device
// kernels on the caller's stream, and whole-layer forwards that allocate
// nothing, never synchronize and read no device memory on the host, so a
// uniform decode/verify forward can be captured in a CUDA graph.
#pragma once

#include <memory>
#include <string>

#include "step5/attention.h"

namespace step5::cuda {

// Throws Error(unsupported) naming the GPU found when there is none, its
// compute capability is below 8.0 or this build has no code for it.
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options);

// Whether make_cuda_backend would succeed for `device_id` (with automatic
// kernels); `why` (optional) says what was found otherwise. Never throws.
bool cuda_backend_available(int device_id, std::string* why);

// One line for logs: the GPU, its limits and the kernel set the backend
// runs. Throws Error(invalid_argument) for a backend that is not cuda.
std::string cuda_backend_summary(const Backend& backend);
// Whether `backend` is a cuda backend running the portable kernels.
bool cuda_backend_portable(const Backend& backend);

}  // namespace step5::cuda
