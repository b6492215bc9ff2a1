// Dynamic shared memory above 48 KB needs a per-kernel opt-in. Raising it
// is a driver call that costs microseconds, so each kernel is raised once
// per device, to the device's limit, rather than before every launch: the
// limit is a cap, occupancy follows what a launch asks for.
#pragma once

#include <cstddef>

namespace step5::cuda {

// `kernel` is a __global__ function's address; thread-safe. Returns the
// dynamic shared memory a launch of it may ask for on the current device
// (the device's opt-in limit less the kernel's static shared memory).
size_t allow_max_smem_impl(const void* kernel);

template <class Kernel>
size_t allow_max_smem(Kernel* kernel) {
  return allow_max_smem_impl(reinterpret_cast<const void*>(kernel));
}

}  // namespace step5::cuda
