// Dynamic shared memory above 48 KB needs a per-kernel opt-in. Raising it
// is a driver call that costs microseconds, so each kernel is raised once
// per device, to the device's limit, rather than before every launch: the
// limit is a cap, occupancy follows what a launch asks for.
#pragma once

namespace step5::cuda {

// `kernel` is a __global__ function's address; thread-safe.
void allow_max_smem_impl(const void* kernel);

template <class Kernel>
void allow_max_smem(Kernel* kernel) {
  allow_max_smem_impl(reinterpret_cast<const void*>(kernel));
}

}  // namespace step5::cuda
