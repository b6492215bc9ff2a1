// Hash-based fill: stateless, so any grid covers any size reproducibly.
#include "cuda/attention/fill.h"

#include <algorithm>

#include "cuda/common/check.h"

namespace step5::cuda {
namespace {

__device__ __forceinline__ uint32_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// Low byte: sign | 6 low bits (e4m3 exponent <= 7, so |x| <= 1.875; as the
// low bf16 byte it is the exponent LSB and mantissa). High byte: sign |
// 0x3c..0x3f (e4m3 1.5..1.875; bf16 exponent 120..127).
__global__ void fill_kernel(uint16_t* data, size_t count, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    const uint32_t r = mix(seed * 0x9e3779b97f4a7c15ull + i);
    const uint32_t lo = r & 0xbfu;
    const uint32_t hi = ((r >> 8) & 0x80u) | 0x3cu | ((r >> 16) & 3u);
    data[i] = static_cast<uint16_t>(lo | (hi << 8));
  }
}

}  // namespace

void fill_cache_random(void* data, size_t bytes, uint64_t seed, cudaStream_t stream) {
  const size_t count = bytes / 2;
  if (count == 0) return;
  const int threads = 256;
  const size_t blocks = std::min<size_t>((count + threads - 1) / threads, 132 * 64);
  fill_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(static_cast<uint16_t*>(data),
                                                                     count, seed);
  check_launch("fill_kernel");
}

}  // namespace step5::cuda
