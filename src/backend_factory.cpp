// make_backend: the one place that knows every backend. It sits above core
// (which the backends build on) so that core never includes a backend.
#include "core/check.h"
#include "cpu/cpu_backend.h"
#include "step5/attention.h"
#if defined(STEP5_HAVE_CUDA)
#include "cuda/cuda_backend.h"
#endif

namespace step5 {

std::unique_ptr<Backend> make_backend(BackendKind kind, const BackendOptions& options) {
  // Options every backend shares are checked here, whichever backend is
  // asked for, so a bad value fails the same way in a CPU-only build.
  const auto kernels = static_cast<unsigned>(options.cuda_kernels);
  detail::require(
      kernels <= static_cast<unsigned>(CudaKernels::portable), ErrorCode::invalid_argument,
      "BackendOptions.cuda_kernels: expected automatic or portable, got the value ", kernels);
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
