// Device storage conversions matching include/step5/numerics.h: bf16 and
// fp8 e4m3 (e4m3fn), both round-to-nearest-even, fp8 saturating at +-448.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
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

// e4m3 -> f16 without the sm_89 conversion instruction (the compute_80
// PTX that every pre-Hopper and future GPU JITs): `h` holds one e4m3 value
// in the high byte of each half. Sign and the 7 magnitude bits moved one
// place right are an f16 whose exponent is 8 below the e4m3 one (bias 15 vs
// 7), subnormals included, so one exact f16x2 multiply by 2^8 rebases both.
// The e4m3 NaN (magnitude 0x7f) would come out as 480: it is made NaN.
__device__ __forceinline__ uint32_t e4m3_hi_bytes_to_f16x2_soft(uint32_t h) {
  const uint32_t f = (h & 0x80008000u) | ((h & 0x7f007f00u) >> 1);
  const __half2 v =
      __hmul2(*reinterpret_cast<const __half2*>(&f), __half2(__half(256.0f), __half(256.0f)));
  const uint32_t nan = __vcmpeq2(h & 0x7f007f00u, 0x7f007f00u);  // 0xffff per NaN half
  return *reinterpret_cast<const uint32_t*>(&v) | (nan & 0x7fff7fffu);
}

// Two e4m3 values in the low 16 bits of `two` (low byte first) as f16x2,
// exactly (one hardware conversion on sm_89 and newer).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
  return e4m3_hi_bytes_to_f16x2_soft(((two & 0xffu) << 8) | ((two & 0xff00u) << 16));
#else
  uint32_t h;
  asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, lo;\n}\n"
      : "=r"(h)
      : "r"(two));
  return h;
#endif
}

// The same for the high 16 bits (no shift: the conversion reads the half).
__device__ __forceinline__ uint32_t e4m3x2_hi_to_f16x2(uint32_t two) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
  return e4m3_hi_bytes_to_f16x2_soft(((two >> 8) & 0xff00u) | (two & 0xff000000u));
#else
  uint32_t h;
  asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, hi;\n}\n"
      : "=r"(h)
      : "r"(two));
  return h;
#endif
}

// Two e4m3 values in the low 16 bits of `two` (low byte first) as bf16x2,
// exactly (every e4m3 value is a bf16 value), in five instructions: the
// hardware converts e4m3 -> f16 (exact, subnormals included); an e4m3-valued
// f16 has at most 3 mantissa bits, so its sign and top bits moved to bf16
// positions are the value times 2^-112 (zero stays zero, every other value
// is a normal bf16), and one bf16x2 multiply by 2^112 (exact) rebases it.
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t two) {
  const uint32_t h = e4m3x2_to_f16x2(two);
  const uint32_t y = ((h >> 3) & 0x0fff0fffu) | (h & 0x80008000u);
  uint32_t v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  // bf16x2 multiply is sm_90; before, an fma adding -0 is the same product
  // (the sign of a zero product is kept).
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(v) : "r"(y), "r"(0x77807780u), "r"(0x80008000u));
#else
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(v) : "r"(y), "r"(0x77807780u));  // x 2^112
#endif
  return v;
}

// bf16 -> f16 with a power-of-two row scale, for MMAs whose other operand
// converts to f16 more cheaply than to bf16 (e4m3). A row of bf16 values is
// scaled by 2^row_shift(e), e its largest exponent field, which takes its
// largest value to f16's top binade; the conversion is then exact for every
// value within 32 binades of that largest (f16 subnormals included).

// bf16 exponent field (0..255) of both halves of a bf16x2 word, the larger.
__device__ __forceinline__ int max_exponent(uint32_t two) {
  return max(static_cast<int>((two >> 7) & 0xffu), static_cast<int>((two >> 23) & 0xffu));
}

// Whether a bf16 value scaled by 2^shift is exact in f16 (subnormals of
// f16 included), given its row's largest exponent field `row_max`.
// Bitwise, not short-circuit: callers test many values in a row, and
// branches per value cost more than the few extra predicates.
__device__ __forceinline__ bool f16_exact(uint32_t bits16, int row_max) {
  const int e = static_cast<int>((bits16 >> 7) & 0xffu);
  const bool zero = (bits16 & 0x7fffu) == 0;                       // +-0
  const bool close = (e != 0) & (e != 255) & (e >= row_max - 32);  // normal, within 32 binades
  return zero | close;
}

// The same test for a whole row at a few instructions per word: fold each
// bf16x2 word of the row into a Bf16Range (per 16-bit lane, the largest
// magnitude and the smallest nonzero magnitude), merge the row's ranges,
// then f16_exact_row() says whether every value of the row passes
// f16_exact() against the row's largest exponent field, top_exponent().
struct Bf16Range {
  uint32_t top;  // per lane: largest |value| bits
  uint32_t low;  // per lane: smallest nonzero |value| bits, minus one (0xffff: none)
};

__device__ __forceinline__ Bf16Range empty_bf16_range() {
  return {0u, 0xffffffffu};
}

__device__ __forceinline__ void add_to_range(Bf16Range& r, uint32_t two) {
  // Magnitude - 1 per lane without a borrow across lanes: with the sign
  // bits set each lane is >= 0x8000, and a zero lane wraps to 0xffff.
  const uint32_t less_one = ((two | 0x80008000u) - 0x00010001u) ^ 0x80008000u;
  r.top = __vmaxu2(r.top, two & 0x7fff7fffu);
  r.low = __vminu2(r.low, less_one);
}

__device__ __forceinline__ Bf16Range merge_ranges(Bf16Range a, Bf16Range b) {
  return {__vmaxu2(a.top, b.top), __vminu2(a.low, b.low)};
}

// Largest exponent field (0..255) of the values in the range.
__device__ __forceinline__ int top_exponent(Bf16Range r) {
  return static_cast<int>(max(r.top & 0xffffu, r.top >> 16) >> 7);
}

// Whether f16_exact(v, top_exponent(r)) holds for every value v folded
// into r: no inf or NaN, no bf16 subnormal, every nonzero value within 32
// binades of the largest.
__device__ __forceinline__ bool f16_exact_row(Bf16Range r) {
  const uint32_t top = max(r.top & 0xffffu, r.top >> 16);
  const uint32_t low = min(r.low & 0xffffu, r.low >> 16);
  if (low == 0xffffu) return true;  // every value is +-0
  const int e_top = static_cast<int>(top >> 7), e_low = static_cast<int>((low + 1u) >> 7);
  return e_top != 255 && e_low != 0 && e_low >= e_top - 32;
}

// Power-of-two exponent that takes a row with largest exponent field
// `row_max` to the top binade of f16 (0 for an all-zero row).
__device__ __forceinline__ int row_shift(int row_max) {
  return row_max == 0 ? 0 : 142 - row_max;
}

// 2^e as a float, for -126 <= e <= 127.
__device__ __forceinline__ float pow2f(int e) {
  return __int_as_float((e + 127) << 23);
}

// Both bf16 values of a bf16x2 word times `scale`, as f16x2 (round to
// nearest; exact when f16_exact holds for both and scale = 2^row_shift).
__device__ __forceinline__ uint32_t scaled_f16x2(uint32_t two, float scale) {
  const __half2 h = __floats2half2_rn(__uint_as_float(two << 16) * scale,
                                      __uint_as_float(two & 0xffff0000u) * scale);
  return *reinterpret_cast<const uint32_t*>(&h);
}

}  // namespace step5::cuda
