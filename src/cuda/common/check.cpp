#include "cuda/common/check.h"

#include "core/check.h"

namespace step5::cuda {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  throw Error(ErrorCode::device_error,
              detail::concat("cuda backend: ", call, " expected cudaSuccess, got ",
                             cudaGetErrorName(status), " (", cudaGetErrorString(status), ") at ",
                             file, ":", line));
}

void check_launch(const char* what) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    throw Error(ErrorCode::device_error,
                detail::concat("cuda backend: launch of ", what, " expected cudaSuccess, got ",
                               cudaGetErrorName(status), " (", cudaGetErrorString(status), ")"));
  }
}

}  // namespace step5::cuda
