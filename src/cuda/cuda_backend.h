// The CUDA backend (NVIDIA Hopper, sm_90a): every SPEC operation as device
// kernels on the caller's stream, and whole-layer forwards that allocate
// nothing, never synchronize and read no device memory on the host, so a
// uniform decode/verify forward can be captured in a CUDA graph.
#pragma once

#include <memory>
#include <string>

#include "step5/attention.h"

namespace step5::cuda {

// Throws Error(unsupported) naming the GPU found when there is none or it is
// not compute capability 9.x.
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options);

// Whether make_cuda_backend would succeed for `device_id`; `why` (optional)
// says what was found otherwise. Never throws.
bool cuda_backend_available(int device_id, std::string* why);

}  // namespace step5::cuda
