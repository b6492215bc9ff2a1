// CUDA runtime error checking. Every failing runtime call becomes a
// step5::Error(device_error) naming the call, so an engine log line says which
// launch or copy broke and why.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "step5/error.h"

namespace step5::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                   int line);

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) throw_cuda_error(status, call, file, line);
}

// Kernel launches report configuration errors only through
// cudaGetLastError; `what` names the kernel.
void check_launch(const char* what);

}  // namespace step5::cuda

#define STEP5_CUDA_CHECK(call) ::step5::cuda::check_cuda((call), #call, __FILE__, __LINE__)
