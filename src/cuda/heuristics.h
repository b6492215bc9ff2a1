// Launch shapes of the cuda backend's own kernels (the attention family has
// its own in src/cuda/attention/). Every choice is a constexpr so kernels and
// launchers agree at compile time; the comments say why each value.
#pragma once

namespace step5::cuda {

// kv_write: one thread per 16-byte bf16 input vector (8 values). 256
// threads keeps enough independent loads in flight per SM at the small
// decode sizes and is a multiple of every row's vector count we support.
constexpr int kv_write_threads() {
  return 256;
}

// summaries: one CTA per (request, closing region), one thread per 8
// summary values; Di = 256 needs 32 threads, larger Di loops. A single warp
// keeps the eight-row reduction inside registers of one warp.
constexpr int summary_threads() {
  return 32;
}

// ring write: one warp per ring row (Di bf16 + z is at most ~2 KB).
constexpr int ring_threads() {
  return 32;
}

// indexer: one warp per region, each lane holding 8 summary values per
// 256-wide chunk (Di <= 1024 -> at most 4 chunks in registers). 8 warps x
// 8 regions per warp = 64 regions per CTA so the query block staged in
// shared memory (up to G*I*Di fp32) is reused across 64 summaries.
constexpr int indexer_warps() {
  return 8;
}
constexpr int indexer_regions_per_cta() {
  return 64;
}
constexpr int indexer_max_chunks() {
  return 4;
}

// select: one CTA per (row, group). 512 threads stream the row's scores
// from L2 four times (8-bit radix passes) plus one compaction pass; at
// C ~ 128K regions (1M tokens) that is 256 scores per thread per pass.
constexpr int select_threads() {
  return 512;
}
constexpr int select_radix_bits() {
  return 8;
}

}  // namespace step5::cuda
