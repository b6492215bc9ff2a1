// Addressing shared by the cpu kernels: elements of the step's strided views
// (strides in elements, innermost dimension contiguous) and rows of the
// caller's caches (strides in bytes, include/step5/cache.h), plus the
// dequantizing loads and quantizing stores of those rows.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "step5/attention.h"
#include "step5/numerics.h"

namespace step5::cpu {

// Element [i0], [i0, i1] or [i0, i1, i2] of a view: with fewer indices than
// the rank, the start of a contiguous innermost row.
template <class T>
T* at(const TensorView& v, int64_t i0) {
  return static_cast<T*>(v.data) + i0 * v.stride[0];
}
template <class T>
T* at(const TensorView& v, int64_t i0, int64_t i1) {
  return static_cast<T*>(v.data) + i0 * v.stride[0] + i1 * v.stride[1];
}
template <class T>
T* at(const TensorView& v, int64_t i0, int64_t i1, int64_t i2) {
  return static_cast<T*>(v.data) + i0 * v.stride[0] + i1 * v.stride[1] + i2 * v.stride[2];
}

// KV block holding `position` of request `r` (block_table[r][position / B]).
inline int64_t block_of(const StepDesc& step, int32_t r, int64_t position, int block_size) {
  return *at<const int32_t>(step.block_table, r, position / block_size);
}

// K || V of token `offset` of KV head `group` in `block`.
inline std::byte* kv_row(const KVCacheView& kv, int64_t block, int group, int64_t offset) {
  return static_cast<std::byte*>(kv.data) + block * kv.block_stride + group * kv.head_stride +
         offset * kv.token_stride;
}

// Summary of region `region` (0 <= region < B/8) of `block`.
inline std::byte* summary_row(const SummaryCacheView& s, int64_t block, int64_t region) {
  return static_cast<std::byte*>(s.data) + block * s.block_stride + region * s.region_stride;
}

// Ring row `slot` of entry `entry`: Di bf16 index-key values, then f32 z.
inline std::byte* ring_row(const RingView& ring, size_t row_bytes, int64_t entry, int64_t slot) {
  return static_cast<std::byte*>(ring.data) + entry * ring.entry_stride +
         slot * static_cast<int64_t>(row_bytes);
}

// All 256 e4m3 codes decoded once: the kernels dequantize millions of values.
inline const std::array<float, 256>& fp8_e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int code = 0; code < 256; ++code) {
      t[static_cast<size_t>(code)] = fp8_e4m3_to_float(static_cast<uint8_t>(code));
    }
    return t;
  }();
  return table;
}

// Reads `count` stored values (bf16, or e4m3 times `scale`) as floats.
inline void load_row(DType dtype, const std::byte* src, float scale, int count, float* dst) {
  if (dtype == DType::bf16) {
    const auto* bits = reinterpret_cast<const uint16_t*>(src);
    for (int i = 0; i < count; ++i) dst[i] = bf16_to_float(bits[i]);
  } else {
    const auto& table = fp8_e4m3_table();
    const auto* codes = reinterpret_cast<const uint8_t*>(src);
    for (int i = 0; i < count; ++i) dst[i] = table[codes[i]] * scale;
  }
}

// Stores `count` bf16 inputs: the bits as given, or e4m3(x / scale).
inline void store_row(DType dtype, const uint16_t* src, float scale, int count, std::byte* dst) {
  if (dtype == DType::bf16) {
    auto* bits = reinterpret_cast<uint16_t*>(dst);
    for (int i = 0; i < count; ++i) bits[i] = src[i];
  } else {
    auto* codes = reinterpret_cast<uint8_t*>(dst);
    for (int i = 0; i < count; ++i) codes[i] = float_to_fp8_e4m3(bf16_to_float(src[i]) / scale);
  }
}

// fp32 dot product of `count` (a multiple of 8: D and Di are) values. Eight
// independent lane sums let the compiler vectorize without reassociating.
inline float dot(const float* a, const float* b, int count) {
  float lane[8] = {};
  for (int d = 0; d < count; d += 8) {
    for (int l = 0; l < 8; ++l) lane[l] += a[d + l] * b[d + l];
  }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

}  // namespace step5::cpu
