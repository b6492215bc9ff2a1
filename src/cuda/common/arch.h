// Which kernel set the cuda backend runs on a GPU: the one place where the
// device's compute capability, the code this build holds and
// BackendOptions::cuda_kernels meet. Pure host code without the CUDA runtime,
// so the choice is unit tested without a GPU (tests/arch_test.cpp).
//
// What needs what:
//   - every kernel but the tensor-core indexer and the wgmma tile
//     attention uses sm_80 features only
//     (mma.sync m16n8k16 bf16/f16, ldmatrix, cp.async; the e4m3 and bf16x2
//     instructions of sm_89/sm_90 have sm_80 fallbacks in numerics.cuh), so
//     the compute_80 PTX of the build runs them on any GPU of compute
//     capability >= 8.0 after a JIT, and the sm_90a SASS on Hopper;
//   - the tensor-core indexer and the wgmma tile attention are sm_90a only
//     (no other GPU has wgmma: Blackwell's tensor cores are tcgen05,
//     docs/blackwell.md), so they run only on compute capability 9.0 from
//     the build's sm_90a SASS. Elsewhere their bodies are a trap that the
//     schedule never launches.
#pragma once

#include <cstdint>
#include <string>

#include "core/check.h"
#include "step5/attention.h"

namespace step5::cuda {

enum class KernelPath : uint8_t {
  hopper,    // the sm_90a kernels where they exist (tensor-core indexer, wgmma tiles)
  portable,  // sm_80-level kernels only (the indexer's generic fp32 path)
};

inline const char* kernel_path_name(KernelPath path) {
  return path == KernelPath::hopper ? "hopper (sm_90a)" : "portable (sm_80+)";
}

// mma.sync with bf16 operands and cp.async both first appear in sm_80.
constexpr int min_compute_major() {
  return 8;
}

// What the backend supports, for messages.
inline const char* supported_gpus() {
  return "a GPU of compute capability 8.0 or newer (Ampere, Ada, Hopper, Blackwell; Hopper 9.0 "
         "runs the sm_90a kernels, every other GPU the portable kernels)";
}

// Empty when a GPU of compute capability major.minor can run the backend,
// else what is wrong with it (for the caller to prefix with the GPU's name).
inline std::string capability_problem(int major, int minor) {
  if (major >= min_compute_major()) return {};
  return detail::concat("compute capability ", major, ".", minor, " is older than 8.0");
}

// The kernel set for a supported GPU (capability_problem empty):
// `built_sm90a` says whether this build holds sm_90a code (STEP5_CUDA_ARCHS).
// Hopper takes it unless the caller asks for the portable kernels; every
// other GPU (8.x, and 10.x / 12.x until native kernels exist) the portable
// ones. Throws Error(unsupported) for an unsupported capability.
inline KernelPath select_kernel_path(int major, int minor, bool built_sm90a,
                                     CudaKernels requested) {
  const std::string problem = capability_problem(major, minor);
  detail::require(problem.empty(), ErrorCode::unsupported, "cuda backend: expected ",
                  supported_gpus(), ", got ", problem);
  // sm_90a SASS runs on 9.0 exactly (arch-specific code has no forward
  // compatibility).
  const bool hopper = major == 9 && minor == 0 && built_sm90a;
  return hopper && requested == CudaKernels::automatic ? KernelPath::hopper : KernelPath::portable;
}

}  // namespace step5::cuda
