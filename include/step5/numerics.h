// Exact storage-format conversions shared by every backend, the oracle and
// the tools: bf16 and fp8 e4m3 (e4m3fn: no infinities, one NaN per sign,
// max finite 448), both round-to-nearest-even.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace step5 {

inline uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// bf16 <-> f32. NaN stays a quiet NaN of the same sign.
inline uint16_t float_to_bf16(float x) {
  uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

inline float bf16_to_float(uint16_t b) {
  return bits_float(static_cast<uint32_t>(b) << 16);
}

inline float round_to_bf16(float x) {
  return bf16_to_float(float_to_bf16(x));
}

// Largest finite e4m3 value; conversions saturate to it.
constexpr float kFp8E4m3Max = 448.0f;

// f32 -> e4m3, nearest even, saturating at +-448; NaN -> 0x7f / 0xff.
inline uint8_t float_to_fp8_e4m3(float x) {
  uint32_t u = float_bits(x);
  uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7f);
  float a = std::fabs(x);
  if (a >= kFp8E4m3Max) return static_cast<uint8_t>(sign | 0x7e);
  if (a < 0.015625f) {  // below 2^-6: subnormals m * 2^-9, m in 0..8
    // a * 512 is exact; rint rounds half to even. m == 8 is the smallest
    // normal, whose code is also 8.
    auto m = static_cast<uint8_t>(std::rint(a * 512.0f));
    return static_cast<uint8_t>(sign | m);
  }
  int e = 0;
  float f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  int exponent = e - 1;         // a = (2f) * 2^exponent, 2f in [1, 2)
  // Mantissa in eighths, exact scaling by a power of two, then nearest even.
  auto m = static_cast<int>(std::rint((2.0f * f - 1.0f) * 8.0f));
  if (m == 8) {
    m = 0;
    ++exponent;
  }
  return static_cast<uint8_t>(sign | ((exponent + 7) << 3) | m);
}

inline float fp8_e4m3_to_float(uint8_t v) {
  int exponent = (v >> 3) & 0xf;
  int m = v & 7;
  float a;
  if (exponent == 0xf && m == 7) {
    a = std::nanf("");
  } else if (exponent == 0) {
    a = std::ldexp(static_cast<float>(m), -9);
  } else {
    a = std::ldexp(1.0f + static_cast<float>(m) / 8.0f, exponent - 7);
  }
  return (v & 0x80) ? -a : a;
}

inline float round_to_fp8_e4m3(float x) {
  return fp8_e4m3_to_float(float_to_fp8_e4m3(x));
}

}  // namespace step5
