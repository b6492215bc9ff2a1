// Pieces of the Hopper tile attention kernels (hopper_csa_kernel.cuh for CSA,
// hopper_window_kernel.cuh for SWA) around their mainloop: the warpgroups'
// softmax state, Q staged as wgmma A, the gates and the epilogue's store.
// sm_90a only.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/attention/epilogue.cuh"
#include "cuda/attention/ptx.cuh"
#include "cuda/common/numerics.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/tile_attention/hopper_geometry.h"
#include "cuda/tile_attention/hopper_mainloop.cuh"
#include "cuda/tile_attention/params.h"

namespace step5::cuda::tiled {

// A warpgroup's softmax state at the start of a tile whose rows are in
// shared memory (read_tile_rows), all but the Q descriptor: the
// warpgroup's rows, their logit scale (fp8: k_scale folded in), key ranges,
// running maxima and sums, and a zero accumulator.
template <int D, bool kFp8, class Smem>
__device__ __forceinline__ void hopper_init_state(const PagedAttentionParams& p, int warpgroup,
                                                  int warp, const Smem& sm, HopperState<D>& w) {
  w.rows = ((1u << hopper_rows_per_warpgroup()) - 1u) << (warpgroup * hopper_rows_per_warpgroup());
  const float scale_log2 = p.softmax_scale * (kFp8 ? p.k_scale : 1.0f) * 1.4426950408889634f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    w.scale_log2[h] = scale_log2;
    w.row[h] = warpgroup * hopper_rows_per_warpgroup() + 2 * warp + h;
    w.m[h] = -INFINITY;
    w.l[h] = 0.0f;
    w.hi[h] = sm.row_position[w.row[h]];
    w.lo[h] = sm.row_low[w.row[h]];
  }
#pragma unroll
  for (int v = 0; v < D / 2; ++v) w.acc[v] = 0.0f;
}

// The KV cache bytes of group g (its blocks kv_block_stride apart).
__device__ __forceinline__ const char* kv_of_group(const PagedAttentionParams& p, int g) {
  return static_cast<const char*>(p.kv) + int64_t{g} * p.kv_head_stride;
}

// Copies the tile's Q into shared memory as wgmma A (K-major, swizzled
// atoms: tile row j is 8-row group j % 8 of warpgroup j / 8, head h its row
// h), 16 bytes at a time when the query is 16-byte aligned, else 4; rows
// past the tile's count are zero. Commits one cp.async group.
template <int D, class Smem>
__device__ void hopper_stage_q(const PagedAttentionParams& p, int64_t first, int count, int g,
                               Smem& sm) {
  constexpr int kHeads = hopper_heads_per_group();
  constexpr int kChunks = D / 8;  // 16-byte chunks of a Q row
  const uint32_t q_base = attn::smem_addr(sm.q);
  const bool wide = reinterpret_cast<uintptr_t>(p.query) % 16 == 0 && p.query_row_stride % 8 == 0 &&
                    p.query_head_stride % 8 == 0;
  for (int idx = static_cast<int>(threadIdx.x); idx < tile_rows() * kHeads * kChunks;
       idx += hopper_threads()) {
    const int row = idx / kChunks, c = idx % kChunks;
    const int j = row / kHeads, h = row % kHeads;
    const bool present = j < count;
    const uint16_t* src = p.query + (first + (present ? j : 0)) * p.query_row_stride +
                          int64_t{g * kHeads + h} * p.query_head_stride + 8 * c;
    const uint32_t dst = q_base + (j / hopper_rows_per_warpgroup()) * Smem::kQWarpgroupBytes +
                         (j % hopper_rows_per_warpgroup()) * Smem::kQGroupBytes +
                         (c / 8) * Smem::kAtomBytes + h * 128 + (((c % 8) ^ h) * 16);
    if (wide) {
      attn::cp_async16(dst, src, present);
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) attn::cp_async4(dst + 4 * k, src + 2 * k, present);
    }
  }
  attn::cp_async_commit();
}

// fp8 pages widen to f16 in one instruction per pair, to bf16 in five: so
// the tile's Q is staged as f16 when that is exact, each MMA row (tile
// row, head) scaled by 2^shift to f16's top binade (numerics.cuh; q_scale
// keeps 2^-shift). Call after Q has landed and a barrier; returns, the
// same in every thread, whether Q is now f16 (else it stays bf16,
// untouched). Two threads per row, each holding its half of the row in
// registers from the test to the conversion (one read of Q): chunks 0-3 of
// each atom for the first, 4-7 for the second, so the 8 threads of a
// quarter warp (4 heads) read 8 distinct 16-byte bank groups.
template <int D, class Smem>
__device__ bool hopper_q_to_f16(Smem& sm) {
  constexpr int kHeads = hopper_heads_per_group();
  constexpr int kHalf = D / 16;  // 16-byte chunks of a Q row per thread
  static_assert(hopper_threads() == 2 * tile_rows() * kHeads, "two threads per Q row");
  const int row = static_cast<int>(threadIdx.x) / 2, part = static_cast<int>(threadIdx.x) % 2;
  const int j = row / kHeads, h = row % kHeads;
  unsigned char* base = sm.q + (j / hopper_rows_per_warpgroup()) * Smem::kQWarpgroupBytes +
                        (j % hopper_rows_per_warpgroup()) * Smem::kQGroupBytes + h * 128;
  auto chunk = [&](int n) {  // the thread's n-th chunk: chunk c = 8 (n / 4) + n % 4 + 4 part
    const int c = 4 * part + n % 4;
    return reinterpret_cast<uint4*>(base + (n / 4) * Smem::kAtomBytes + ((c ^ h) * 16));
  };
  static_assert(kHalf % 4 == 0, "a thread takes half of each atom's 8 chunks");
  uint4 v[kHalf];
  Bf16Range range = empty_bf16_range();
#pragma unroll
  for (int n = 0; n < kHalf; ++n) {
    v[n] = *chunk(n);
    add_to_range(range, v[n].x);
    add_to_range(range, v[n].y);
    add_to_range(range, v[n].z);
    add_to_range(range, v[n].w);
  }
  range = merge_ranges(range, {__shfl_xor_sync(0xffffffffu, range.top, 1),
                               __shfl_xor_sync(0xffffffffu, range.low, 1)});
  const int shift = row_shift(top_exponent(range));
  const bool exact = shift <= 100 && f16_exact_row(range);
  if (__syncthreads_and(exact) == 0) return false;
  const float scale = pow2f(shift);
#pragma unroll
  for (int n = 0; n < kHalf; ++n) {
    *chunk(n) = make_uint4(scaled_f16x2(v[n].x, scale), scaled_f16x2(v[n].y, scale),
                           scaled_f16x2(v[n].z, scale), scaled_f16x2(v[n].w, scale));
  }
  if (part == 0) sm.q_scale[j][h] = pow2f(-shift);
  __syncthreads();
  return true;
}

// fp8 pages: waits for Q's copies (and every copy issued before the wait),
// stages Q as scaled f16 where that is exact (hopper_q_to_f16) and runs
// `run(std::true_type)` with the rows' logit scales corrected, else
// `run(std::false_type)` (bf16 stages).
template <int D, class Smem, class Run>
__device__ __forceinline__ void hopper_run_in_q_format(Smem& sm, int lane, HopperState<D>& w,
                                                       Run&& run) {
  attn::cp_async_wait<0>();
  __syncthreads();
  if (hopper_q_to_f16<D>(sm)) {
#pragma unroll
    for (int h = 0; h < 2; ++h) w.scale_log2[h] *= sm.q_scale[w.row[h]][lane / 4];
    run(std::true_type{});
  } else {
    run(std::false_type{});
  }
}

// Normalizes (v_scale / l: fp8 V is staged unscaled), gates (sigmoid of the head's gate) and rounds
// each row once to bf16, staged in shared memory at `staging` (Smem::kOutBytes of the drained
// stage buffers), then stores 16 bytes at a time. Rows in `bad_rows` come out NaN. `gate`: the
// thread's two rows' gates (load_gates).
template <int D, class Smem>
__device__ void hopper_store_tile(const PagedAttentionParams& p, int64_t first, int count, int g,
                                  float v_scale, uint32_t bad_rows, const uint16_t (&gate)[2],
                                  HopperState<D>& w, unsigned char* staging) {
  constexpr int kHeads = hopper_heads_per_group();
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int head = lane / 4, c0 = 2 * (lane % 4);
  uint16_t* out = reinterpret_cast<uint16_t*>(staging);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = w.l[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int j = w.row[h];
    float f = v_scale / l;
    if (j < count && p.gate != nullptr) f *= attn::sigmoid_of_bf16(gate[h]);
    if (((bad_rows >> j) & 1u) != 0) f = NAN;
    uint16_t* row = out + (j * kHeads + head) * Smem::kOutPitch + c0;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<uint32_t*>(row + 8 * n) =
          attn::pack_bf16x2(w.acc[4 * n + 2 * h] * f, w.acc[4 * n + 2 * h + 1] * f);
    }
  }
  __syncthreads();
  constexpr int kVectors = tile_rows() * kHeads * (D / 8);
  for (int idx = static_cast<int>(threadIdx.x); idx < kVectors; idx += hopper_threads()) {
    const int r = idx / (D / 8), d0 = (idx % (D / 8)) * 8;
    const int j = r / kHeads;
    if (j >= count) continue;
    *reinterpret_cast<uint4*>(p.output + (first + j) * p.output_row_stride +
                              int64_t{g * kHeads + r % kHeads} * p.output_head_stride + d0) =
        *reinterpret_cast<const uint4*>(out + r * Smem::kOutPitch + d0);
  }
}

// The gates (bf16 bits) of the thread's two rows (head lane / 4 of tile
// rows w.row[]), loaded when the CTA starts so that their latency is
// hidden behind the mainloop, not paid in the epilogue.
template <int D>
__device__ __forceinline__ void load_gates(const PagedAttentionParams& p, int64_t first, int count,
                                           int g, const HopperState<D>& w, uint16_t (&gate)[2]) {
  const int head = g * hopper_heads_per_group() + static_cast<int>(threadIdx.x) % 32 / 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    gate[h] = p.gate != nullptr && w.row[h] < count
                  ? __ldg(p.gate + (first + w.row[h]) * p.gate_row_stride + head)
                  : uint16_t{0};
  }
}

}  // namespace step5::cuda::tiled
