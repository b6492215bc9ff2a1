// The select kernel's distance bins, as host and device code: the kernel
// (select.cuh) bins scores by them, and the CPU tests check the property its
// ordered pass relies on (tests/select_bins_test.cpp, through
// step5/testing/cuda_internals.h).
//
// Bins measure the distance d of an order key (score_key.cuh) below the
// row's best key: 64 exact bins for d < 64, then 64 sub-bins per power of
// two up to 2^32 (like a float with 6 mantissa bits), so they are fine near
// the top where the K-th score lies. Bin numbers grow with the key.
#pragma once

#include <cstdint>

#include "cuda/heuristics.h"

#if defined(__CUDACC__)
#define STEP5_SELECT_BINS_FN __host__ __device__ __forceinline__
#else
#define STEP5_SELECT_BINS_FN inline
#endif

namespace step5::cuda {

// floor(log2(x)) for x > 0.
STEP5_SELECT_BINS_FN int select_log2_floor(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return 31 - __clz(x);
#else
  return 31 - __builtin_clz(x);
#endif
}

// Distance bin of `key` below `best`: larger keys, larger bins. Without
// branches: a branch per score here was a third of the kernel's
// instructions (ncu, 128K decode).
STEP5_SELECT_BINS_FN int select_bin(uint32_t key, uint32_t best) {
  const uint32_t d = key >= best ? 0u : best - key;
  const int e = select_log2_floor(d | 1u);  // 6..31 when d >= 64
  // The same value either way; the device keeps the spelling whose code was
  // measured (the ternary compiles to different, longer code there).
#if defined(__CUDA_ARCH__)
  const int shift = max(e - 6, 0);
#else
  const int shift = e > 6 ? e - 6 : 0;
#endif
  const int fine = (e - 5) * 64 + static_cast<int>((d >> shift) & 63u);
  const int g = d < 64u ? static_cast<int>(d) : fine;
  return select_bins() - 1 - g;
}

// The smallest key whose bin is >= `bin` (bins fall as the distance below
// `best` grows): a key belongs to bin `bin` or above exactly when it is >=
// this, so the ordered pass compares keys instead of computing bins.
STEP5_SELECT_BINS_FN uint32_t select_bin_floor(int bin, uint32_t best) {
  const int g = select_bins() - 1 - bin;
  uint64_t d_hi = static_cast<uint64_t>(g);  // the largest distance of bin g
  if (g >= 64) {
    const int e = g / 64 + 5, sub = g % 64;
    d_hi = (static_cast<uint64_t>(65 + sub) << (e - 6)) - 1u;
  }
  return d_hi >= best ? 0u : best - static_cast<uint32_t>(d_hi);
}

// The first of the 8 regions the select kernel samples in stride `b` of
// select_sample_stride() regions (select.cuh, sampled_floor): an offset
// hashed from b, so a periodic pattern of scores is not sampled in phase.
STEP5_SELECT_BINS_FN int32_t select_sample_first(int32_t b) {
  const uint32_t hash = (static_cast<uint32_t>(b) * 2654435761u) >> 16;
  return b * select_sample_stride() +
         8 * static_cast<int32_t>(hash % static_cast<uint32_t>(select_sample_stride() / 8));
}

}  // namespace step5::cuda

#undef STEP5_SELECT_BINS_FN
