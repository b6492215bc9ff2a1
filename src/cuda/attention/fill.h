// Device-side fill for benchmarks: caches of 1M-token contexts are several
// GB and must not be produced on the host.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace step5::cuda {

// Fills `bytes` (even) bytes with pseudo-random bytes that are finite and
// of magnitude <= 2 under every storage reading the caches use: each byte is
// an e4m3 value in [-1.875, 1.875] and each little-endian byte pair a bf16
// value of magnitude in [2^-7, 1). So one fill serves bf16 and fp8 KV and
// fp8 or bf16 summaries alike.
void fill_cache_random(void* data, size_t bytes, uint64_t seed, cudaStream_t stream);

}  // namespace step5::cuda
