// Order keys of fp32 scores: a larger float gives a larger unsigned key, so
// selection can work on integers (radix digits, atomicMax). +0 and -0 map
// to one key (a relu'd score of 0 can come out as either sign).
#pragma once

#include <cstdint>

namespace step5::cuda {

__device__ __forceinline__ uint32_t score_key(float x) {
  const uint32_t u = __float_as_uint(x == 0.0f ? 0.0f : x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

}  // namespace step5::cuda
