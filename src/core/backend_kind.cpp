// Names of the backend kinds and of the cuda kernel sets. The factory that creates backends lives
// in src/backend_factory.cpp, outside core, so core never includes a backend.
#include <cstring>

#include "core/check.h"
#include "step5/attention.h"

namespace step5 {

const char* backend_kind_name(BackendKind kind) {
  return kind == BackendKind::cpu ? "cpu" : "cuda";
}

BackendKind parse_backend_kind(const char* name) {
  if (name != nullptr && std::strcmp(name, "cpu") == 0) return BackendKind::cpu;
  if (name != nullptr && std::strcmp(name, "cuda") == 0) return BackendKind::cuda;
  detail::fail_invalid("backend: expected cpu or cuda, got '", name ? name : "(null)", "'");
}

const char* cuda_kernels_name(CudaKernels kernels) {
  switch (kernels) {
    case CudaKernels::automatic: return "auto";
    case CudaKernels::portable: return "portable";
  }
  return "invalid";
}

CudaKernels parse_cuda_kernels(const char* name) {
  if (name != nullptr && std::strcmp(name, "auto") == 0) return CudaKernels::automatic;
  if (name != nullptr && std::strcmp(name, "portable") == 0) return CudaKernels::portable;
  detail::fail_invalid("cuda kernels: expected auto or portable, got '", name ? name : "(null)",
                       "'");
}

}  // namespace step5
