// Compile-time tile geometry of one paged attention instantiation: shared
// memory pitches and buffer sizes, shared by kernel and launcher.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cuda/attention/heuristics.h"

namespace step5::cuda::attn {

// Heads per group are a run-time value (1..mma_rows()).
// kStagesPerWarp: the cp.async pipeline depth, attention_stages() by
// default, attention_compact_stages() for GPUs with less shared memory.
template <int D, bool kFp8, bool kCsa, int kStagesPerWarp = attention_stages(kFp8)>
struct Tile {
  static_assert(D % 16 == 0, "D must be a multiple of 16 (m16n8k16 k-steps, ldmatrix pairs)");
  static constexpr int kDim = D;
  static constexpr bool kIsFp8 = kFp8;
  static constexpr bool kIsCsa = kCsa;
  static constexpr int kElemBytes = kFp8 ? 1 : 2;
  // One token row as stored (K || V) and as staged: unpadded, its 16-byte
  // chunks swizzled within groups of 8 (fragments.cuh, stage_chunk_offset)
  // so that ldmatrix over 8 rows (bf16), and 16-byte K loads and ldmatrix
  // of V (fp8), are conflict free.
  static constexpr int kRawRowBytes = 2 * D * kElemBytes;
  static constexpr int kRawPitch = kRawRowBytes;
  static constexpr int kChunks = kRawRowBytes / 16;  // 16-byte cp.async per row
  // A step's copies spread evenly over the warp's lanes.
  static constexpr int kCopiesPerLane = keys_per_step() * kChunks / 32;
  static_assert(keys_per_step() * kChunks % 32 == 0, "a step's chunks must fill whole warps");
  static constexpr int kStageBytes = keys_per_step() * kRawPitch;
  static constexpr int kStages = kStagesPerWarp;
  static constexpr int kWarpBytes = kStages * kStageBytes;
  // The end-of-CTA merge reuses the stage buffers: per warp [16][D] acc and
  // [16][2] (m, l) in fp32.
  static constexpr int kMergeBytes = attention_warps() * mma_rows() * (D + 2) * 4;
  static constexpr int kBufferBytes = std::max(attention_warps() * kWarpBytes, kMergeBytes);
  static_assert(!kFp8 || D % 64 == 0,
                "fp8 rows swizzle 16-byte chunks in groups of 8: D must be a multiple of 64");
  static_assert(kRawRowBytes % 128 == 0,
                "staged rows start in bank group 0 (the chunk swizzle assumes it)");
  static_assert(kBufferBytes % 16 == 0, "page list must start 16-byte aligned");

  // Dynamic shared memory: buffers, then the CSA row's compacted page list
  // (`max_pages` int32) and the split's block ids (`table_pages` int32).
  static constexpr size_t smem_bytes(int64_t max_pages, int64_t table_pages) {
    return static_cast<size_t>(kBufferBytes) +
           static_cast<size_t>((kCsa ? max_pages : 0) + table_pages) * 4;
  }
  // The most dynamic shared memory any valid layer asks of this tile
  // (K = max_topk(), or an SWA window wide enough to fill the block table).
  static constexpr size_t kWorstSmemBytes =
      kCsa ? smem_bytes(csa_max_pages(max_topk()), block_table_pages(csa_max_pages(max_topk())))
           : smem_bytes(0, block_table_pages(int64_t{1} << 40));
};

// Whether the default tile can exceed the smallest supported GPU's shared
// memory for some layer, so a compact variant is compiled next to it (only
// there: each variant is one more kernel to compile per target).
template <int D, bool kFp8, bool kCsa>
constexpr bool has_compact_tile() {
  return Tile<D, kFp8, kCsa>::kWorstSmemBytes + static_smem_reserve() > min_optin_smem();
}

}  // namespace step5::cuda::attn
