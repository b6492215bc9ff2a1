// CUDA runtime checks of the CLI's GPU commands (bench, check), on the
// public headers only: STEP5_TOOL_CUDA_CHECK turns a failing call into
// step5::Error(device_error) naming the call and where, worded as the
// library's own checks; cuda_ok throws std::runtime_error naming `what`.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "step5/error.h"

namespace step5::tool {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                          int line) {
  throw Error(ErrorCode::device_error,
              std::string("cuda backend: ") + call + " expected cudaSuccess, got " +
                  cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ") at " + file +
                  ":" + std::to_string(line));
}

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) throw_cuda_error(status, call, file, line);
}

inline void cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

}  // namespace step5::tool

#define STEP5_TOOL_CUDA_CHECK(call) ::step5::tool::check_cuda((call), #call, __FILE__, __LINE__)
