// Device storage conversions matching include/step5/numerics.h: bf16 and
// fp8 e4m3 (e4m3fn), both round-to-nearest-even, fp8 saturating at +-448.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace step5::cuda {

__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

// Same as step5::float_to_bf16 (NaN kept quiet with its sign).
__device__ __forceinline__ uint16_t float_to_bf16_bits(float x) {
  const uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// cvt.rn.satfinite.e4m3: nearest even, finite values saturate to +-448.
// NaN maps to 0x7f with the sign kept, as the host conversion does.
__device__ __forceinline__ uint8_t float_to_fp8_bits(float x) {
  const uint8_t sign = static_cast<uint8_t>((__float_as_uint(x) >> 24) & 0x80u);
  if (isnan(x)) return static_cast<uint8_t>(sign | 0x7f);
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float fp8_bits_to_float(uint8_t v) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), __NV_E4M3);
  return __half2float(__half(h));
}

}  // namespace step5::cuda
