// Storage conversions (numerics.h): fp8 e4m3 and bf16 round to nearest even
// and saturate as the SPEC says, checked against values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "step5/numerics.h"

namespace step5 {
namespace {

struct Fp8Case {
  float in;
  float want;
  const char* why;
};

TEST(Numerics, Fp8KnownValues) {
  const Fp8Case cases[] = {
      {0.0f, 0.0f, "zero"},
      {0x1p-9f, 0x1p-9f, "smallest subnormal"},
      {0x1p-10f, 0.0f, "half the smallest subnormal ties to even (0)"},
      {3 * 0x1p-10f, 0x1p-8f, "1.5 subnormal steps ties to even (2 steps)"},
      {0x1p-6f, 0x1p-6f, "smallest normal"},
      {0.3f, 0.3125f, "0.3 -> 1.25 * 2^-2"},
      {1.0f, 1.0f, "one"},
      {1.0625f, 1.0f, "halfway between 1 and 1.125 ties to even mantissa 0"},
      {1.1875f, 1.25f, "halfway between 1.125 and 1.25 ties to even mantissa 2"},
      {1.2f, 1.25f, "nearest"},
      {240.0f, 240.0f, "240 is representable"},
      {448.0f, 448.0f, "largest finite"},
      {449.0f, 448.0f, "saturates"},
      {1e6f, 448.0f, "saturates far out"},
      {-448.0f, -448.0f, "negative largest"},
      {-0.3f, -0.3125f, "sign is kept"},
      {std::numeric_limits<float>::infinity(), 448.0f, "inf saturates"},
      {-std::numeric_limits<float>::infinity(), -448.0f, "-inf saturates"},
  };
  for (const Fp8Case& c : cases) {
    EXPECT_EQ(round_to_fp8_e4m3(c.in), c.want) << c.why << " (input " << c.in << ")";
  }
  EXPECT_TRUE(std::isnan(round_to_fp8_e4m3(std::nanf(""))));
  EXPECT_EQ(float_to_fp8_e4m3(std::nanf("")) & 0x7f, 0x7f);
  EXPECT_EQ(float_to_fp8_e4m3(448.0f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3(-0x1p-9f), 0x81);
}

TEST(Numerics, Fp8EveryCodeRoundTrips) {
  float previous = -1.0f;
  for (int code = 0; code < 256; ++code) {
    const auto v = static_cast<uint8_t>(code);
    const float x = fp8_e4m3_to_float(v);
    if ((code & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(x)) << "code " << code;
      continue;
    }
    ASSERT_TRUE(std::isfinite(x)) << "code " << code;
    // -0 (0x80) encodes back to 0x80, so every non-NaN code round-trips.
    EXPECT_EQ(float_to_fp8_e4m3(x), v) << "code " << code << " value " << x;
    EXPECT_EQ(std::signbit(x), code >= 0x80) << "code " << code;
    if (code < 0x7f) {
      // Positive codes are strictly increasing in value.
      EXPECT_GT(x, previous) << "code " << code;
      previous = x;
    }
    if (code >= 0x80) {
      EXPECT_EQ(x, -fp8_e4m3_to_float(static_cast<uint8_t>(code & 0x7f)));
    }
  }
}

TEST(Numerics, Fp8MidpointsTieToEven) {
  // Between every two adjacent positive codes, the midpoint goes to the
  // code with an even mantissa and anything off the midpoint to the nearest.
  for (int code = 0; code < 0x7e; ++code) {
    const float lo = fp8_e4m3_to_float(static_cast<uint8_t>(code));
    const float hi = fp8_e4m3_to_float(static_cast<uint8_t>(code + 1));
    const float mid = 0.5f * (lo + hi);
    const int even = (code % 2 == 0) ? code : code + 1;
    EXPECT_EQ(float_to_fp8_e4m3(mid), even) << "midpoint of " << lo << " and " << hi;
    EXPECT_EQ(float_to_fp8_e4m3(std::nextafter(mid, 0.0f)), code) << "below " << mid;
    EXPECT_EQ(float_to_fp8_e4m3(std::nextafter(mid, 1e9f)), code + 1) << "above " << mid;
  }
}

TEST(Numerics, Bf16RoundToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f), 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even.
  EXPECT_EQ(round_to_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
  EXPECT_EQ(round_to_bf16(0.1f), 0.10009765625f);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(round_to_bf16(inf), inf);
  EXPECT_EQ(round_to_bf16(-inf), -inf);
  // Above the largest finite bf16 by half an ulp or more rounds to inf.
  EXPECT_EQ(round_to_bf16(std::numeric_limits<float>::max()), inf);
  const uint16_t nan = float_to_bf16(-std::nanf(""));
  EXPECT_TRUE(std::isnan(bf16_to_float(nan)));
  EXPECT_EQ(nan & 0x8000, 0x8000) << "NaN keeps its sign";
  for (uint32_t b = 0; b < 0x10000; b += 7) {
    const auto bits = static_cast<uint16_t>(b);
    const float x = bf16_to_float(bits);
    if (!std::isnan(x)) {
      EXPECT_EQ(float_to_bf16(x), bits) << "bits " << b;
    }
  }
}

}  // namespace
}  // namespace step5
