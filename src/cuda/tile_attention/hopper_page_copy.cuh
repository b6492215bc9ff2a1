// Stage copies of the Hopper tile attention kernel: the regions of a list
// stage from the paged cache into the stage buffer's swizzled atoms (one
// region per warp), by cp.async; fp8 pages raw, widened to f16 or bf16
// (exact) in place once they have landed (hopper_mainloop.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "cuda/attention/ptx.cuh"
#include "cuda/common/numerics.cuh"
#include "cuda/tile_attention/hopper_geometry.h"
#include "cuda/tile_attention/params.h"

namespace step5::cuda::tiled {

// Bit of a list entry's row mask (rows use bits 0..15) set when some row's
// key range starts or ends inside the region, so only stages holding such
// regions compare key positions (set by hopper_swa_list and
// mark_cut_regions).
constexpr uint32_t kCutRegion = 1u << 31;

// Token offsets of the list's regions inside their blocks, kept in the
// page source's row masks once the list is built (they are free then).
template <class Smem>
__device__ __forceinline__ int32_t* region_slots(Smem& sm) {
  return reinterpret_cast<int32_t*>(sm.row_mask);
}
template <class Smem>
__device__ __forceinline__ const int32_t* region_slots(const Smem& sm) {
  return reinterpret_cast<const int32_t*>(sm.row_mask);
}

// Buffer of list stage `i`: a ring of Smem::kStages.
template <class Smem>
__device__ __forceinline__ unsigned char* hopper_stage(Smem& sm, int32_t i) {
  return sm.buffer + (i % Smem::kStages) * Smem::kStageBytes;
}
template <class Smem>
__device__ __forceinline__ const unsigned char* hopper_stage(const Smem& sm, int32_t i) {
  return sm.buffer + (i % Smem::kStages) * Smem::kStageBytes;
}

// The shared address of list stage `i`'s buffer for the wgmma descriptors,
// broadcast from lane 0: ptxas cannot prove the stage index warp-uniform
// (the list length it comes from is read from shared memory), and without
// the broadcast it moved each wgmma's descriptors into uniform registers
// with ~9 instructions.
template <class Smem>
__device__ __forceinline__ uint32_t uniform_stage_addr(const Smem& sm, int32_t i) {
  return __shfl_sync(0xffffffffu, attn::smem_addr(hopper_stage(sm, i)), 0);
}

// The source row of lane l's key (l / 4) in region 8 i + w of the list,
// offset by 16 (l % 4) bytes, and whether the key is read (else its atoms
// get zeros): keys no row of the tile may attend (before the lowest
// window, past the last row, in blocks outside the cache, past the list)
// are zero-filled, as 0 * NaN in P V would poison a row.
template <class Smem>
__device__ __forceinline__ const char* stage_row_source(const PagedAttentionParams& p,
                                                        const char* kv_head, int32_t i,
                                                        int32_t length, int32_t key_lo,
                                                        int32_t key_hi, const Smem& sm,
                                                        bool& valid) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int key = lane / 4;
  const int32_t e = i * hopper_stage_regions() + warp;
  valid = false;
  const char* src = kv_head;
  if (e < length) {
    const int32_t block = sm.list_block[e];
    const int32_t kpos = sm.list_region[e] * attn::page_tokens() + key;
    valid = block >= 0 && kpos >= key_lo && kpos <= key_hi;
    if (valid) {
      src += int64_t{block} * p.kv_block_stride +
             int64_t{region_slots(sm)[e] + key} * p.kv_token_stride + 16 * (lane % 4);
    }
  }
  return src;
}

// 16 bytes from src + kSrc to shared dst + kDst (immediate offsets), or 16
// zero bytes when src_bytes is 0.
template <int kDst, int kSrc>
__device__ __forceinline__ void cp_async16_at(uint32_t dst, const char* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0+%2], [%1+%3], 16, %4;\n" ::"r"(dst), "l"(src),
               "n"(kDst), "n"(kSrc), "r"(src_bytes)
               : "memory");
}

// Pass P of a lane's copies (hopper_issue_stage): chunk 4 P + l % 4 of its
// key's row, in atom P / 2 at the even or odd pass's swizzled position.
template <class Smem, int... P>
__device__ __forceinline__ void copy_row_chunks(uint32_t dst_even, uint32_t dst_odd,
                                                const char* src, int src_bytes,
                                                std::integer_sequence<int, P...>) {
  (cp_async16_at<(P / 2) * Smem::kAtomBytes, P * 64>(P % 2 != 0 ? dst_odd : dst_even, src,
                                                     src_bytes),
   ...);
}

// The raw pieces of an fp8 stage (hopper_issue_stage_fp8): piece P (64 P
// bytes into the lane's row source) to dst + 512 P.
template <int... P>
__device__ __forceinline__ void copy_raw_pieces(uint32_t dst, const char* src, int src_bytes,
                                                std::integer_sequence<int, P...>) {
  (cp_async16_at<P * 512, P * 64>(dst, src, src_bytes), ...);
}

// Issues the copies of bf16 list stage `i` and commits them as one group.
// Warp w copies region 8 i + w: lane l takes key k = l / 4 and, in each of
// kRowChunks / 4 passes P, chunk c = 4 P + l % 4 of that key's K || V row
// into its atom (swizzled: at c % 8 ^ k), so one instruction writes 512
// bytes over all banks evenly and reads 64 contiguous bytes of each of the
// region's 8 rows.
template <class Smem>
__device__ __forceinline__ void hopper_issue_stage(const PagedAttentionParams& p,
                                                   const char* kv_head, int32_t i, int32_t length,
                                                   int32_t key_lo, int32_t key_hi, Smem& sm) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int key = lane / 4;
  bool valid = false;
  const char* src = stage_row_source(p, kv_head, i, length, key_lo, key_hi, sm, valid);
  const uint32_t row = attn::smem_addr(hopper_stage(sm, i)) + warp * Smem::kRegionBytes + key * 128;
  const int x = (lane % 4) ^ key;
  copy_row_chunks<Smem>(row + 16 * x, row + 16 * (x ^ 4), src, valid ? 16 : 0,
                        std::make_integer_sequence<int, Smem::kRowChunks / 4>{});
  attn::cp_async_commit();
}

// fp8 stages go by cp.async too, raw, into the upper half of each region's
// bytes (a region's fp8 K || V rows are half its widened size), and are
// widened in place once they have landed (hopper_widen_stage_fp8), so no
// registers hold a stage in flight across the MMAs. The raw half is laid
// out by lane: piece k of lane l at 16 (32 k + l), so each copy
// instruction and each read-back covers 512 contiguous bytes.
template <class Smem>
struct Fp8Stage {
  static constexpr int kPieces = Smem::kRowChunks / 8;  // 16-byte fp8 pieces of a lane
  static constexpr int kRawOffset = Smem::kRegionBytes / 2;
  static_assert(kPieces * 32 * 16 == Smem::kRegionBytes / 2, "raw rows fill the upper half");
};

// Issues the raw copies of fp8 list stage `i` and commits them as one
// group. Lane l of warp w copies pieces 4 P + l % 4 (P < kPieces) of key
// l / 4 of region 8 i + w (zeros for keys not read).
template <class Smem>
__device__ __forceinline__ void hopper_issue_stage_fp8(const PagedAttentionParams& p,
                                                       const char* kv_head, int32_t i,
                                                       int32_t length, int32_t key_lo,
                                                       int32_t key_hi, Smem& sm) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  bool valid = false;
  const char* src = stage_row_source(p, kv_head, i, length, key_lo, key_hi, sm, valid);
  const uint32_t raw = attn::smem_addr(hopper_stage(sm, i)) + warp * Smem::kRegionBytes +
                       Fp8Stage<Smem>::kRawOffset + 16 * lane;
  copy_raw_pieces(raw, src, valid ? 16 : 0,
                  std::make_integer_sequence<int, Fp8Stage<Smem>::kPieces>{});
  attn::cp_async_commit();
}

// Widens the lane's landed raw pieces of stage `i` (the caller waited for
// its copies) to bf16, or to f16 when kF16 (both exact), in place: piece
// 4 P + l % 4 becomes 16-bit chunks 2 (4 P + l % 4) and the next, each at
// its swizzled position (c % 8 ^ key) in atom c / 8. Every lane of the warp
// reads its pieces before any writes (the widened rows cover the raw
// half). f16 takes one conversion per pair, bf16 five (numerics.cuh).
template <bool kF16, class Smem>
__device__ __forceinline__ void hopper_widen_stage_fp8(int32_t i, Smem& sm) {
  constexpr int kPieces = Fp8Stage<Smem>::kPieces;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int key = lane / 4;
  unsigned char* region = hopper_stage(sm, i) + warp * Smem::kRegionBytes;
  uint4 raw[kPieces];
#pragma unroll
  for (int k = 0; k < kPieces; ++k) {
    raw[k] =
        *reinterpret_cast<const uint4*>(region + Fp8Stage<Smem>::kRawOffset + 16 * (32 * k + lane));
  }
  __syncwarp();
  unsigned char* row = region + key * 128;
#pragma unroll
  for (int k = 0; k < kPieces; ++k) {
    const uint32_t w[4] = {raw[k].x, raw[k].y, raw[k].z, raw[k].w};
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int c = 2 * (4 * k + lane % 4) + half;
      uint4 out;
      if constexpr (kF16) {
        out.x = e4m3x2_to_f16x2(w[2 * half]);
        out.y = e4m3x2_hi_to_f16x2(w[2 * half]);
        out.z = e4m3x2_to_f16x2(w[2 * half + 1]);
        out.w = e4m3x2_hi_to_f16x2(w[2 * half + 1]);
      } else {
        out.x = e4m3x2_to_bf16x2(w[2 * half] & 0xffffu);
        out.y = e4m3x2_to_bf16x2(w[2 * half] >> 16);
        out.z = e4m3x2_to_bf16x2(w[2 * half + 1] & 0xffffu);
        out.w = e4m3x2_to_bf16x2(w[2 * half + 1] >> 16);
      }
      *reinterpret_cast<uint4*>(row + (c / 8) * Smem::kAtomBytes + (((c % 8) ^ key) * 16)) = out;
    }
  }
}

}  // namespace step5::cuda::tiled
