#include <cstring>

#include "core/check.h"
#include "cpu/cpu_backend.h"
#include "step5/attention.h"
#if defined(STEP5_HAVE_CUDA)
#include "cuda/cuda_backend.h"
#endif

namespace step5 {

const char* backend_kind_name(BackendKind kind) {
  return kind == BackendKind::cpu ? "cpu" : "cuda";
}

BackendKind parse_backend_kind(const char* name) {
  if (name != nullptr && std::strcmp(name, "cpu") == 0) return BackendKind::cpu;
  if (name != nullptr && std::strcmp(name, "cuda") == 0) return BackendKind::cuda;
  detail::fail_invalid("backend: expected cpu or cuda, got '", name ? name : "(null)", "'");
}

std::unique_ptr<Backend> make_backend(BackendKind kind, const BackendOptions& options) {
  if (kind == BackendKind::cpu) return cpu::make_cpu_backend(options);
#if defined(STEP5_HAVE_CUDA)
  return cuda::make_cuda_backend(options);
#else
  detail::fail(ErrorCode::unsupported,
               "backend cuda: expected a build with the CUDA backend, got a CPU-only build "
               "(configure with nvcc available, STEP5_CUDA=ON)");
#endif
}

}  // namespace step5
