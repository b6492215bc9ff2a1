// Mainloop of the tile attention kernel: the window's region list streamed
// through a cp.async pipeline that every warp of the CTA shares (stage
// copies spread over all threads), and each warp's online softmax over the
// 16-key steps its rows attend.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/attention/fragments.cuh"
#include "cuda/attention/ptx.cuh"
#include "cuda/attention/softmax.cuh"
#include "cuda/tile_attention/geometry.h"
#include "cuda/tile_attention/params.h"

namespace step5::cuda::tiled {

// Pipeline stage of list stage `i`: a ring of Smem::kStages buffers.
template <class Smem>
__device__ __forceinline__ unsigned char* stage_buffer(Smem& sm, int32_t i) {
  return sm.buffer + (i % Smem::kStages) * Smem::kStageBytes;
}

// Issues the copies of list stage `i` (regions 4i .. 4i + 3 of the list) and
// commits them as one group. Each key row is copied by blockDim / 32
// threads, each taking every (blockDim / 32)-th 16-byte chunk, so a thread
// computes one source address per stage. Keys no row of the tile may attend
// (past the last row, before the first window, blocks outside the cache,
// past the list) are zero-filled: 0 * NaN in P V would poison a row.
template <class T, class Smem>
__device__ void issue_stage(const PagedAttentionParams& p, const char* kv_head, int32_t i,
                            int32_t length, int32_t key_lo, int32_t key_hi, Smem& sm) {
  static_assert(T::kChunks % 8 == 0, "a key row's chunks split evenly over 1, 2, 4 or 8 threads");
  const int per_key = static_cast<int>(blockDim.x) / stage_keys();
  const int key = static_cast<int>(threadIdx.x) / per_key;
  const int part = static_cast<int>(threadIdx.x) % per_key;
  const int32_t e = i * stage_regions() + key / attn::page_tokens();
  bool valid = false;
  const char* src = kv_head;
  if (e < length) {
    const int32_t block = sm.list_block[e];
    const int32_t kpos = sm.list_region[e] * attn::page_tokens() + key % attn::page_tokens();
    valid = block >= 0 && kpos >= key_lo && kpos <= key_hi;
    if (valid) {
      src = kv_head + int64_t{block} * p.kv_block_stride +
            int64_t{kpos % p.block_size} * p.kv_token_stride;
    }
  }
  const uint32_t dst =
      attn::smem_addr(stage_buffer(sm, i)) + (key / attn::keys_per_step()) * T::kStageBytes;
  const int row = key % attn::keys_per_step();
  for (int chunk = part; chunk < T::kChunks; chunk += per_key) {
    attn::cp_async16(dst + attn::stage_chunk_offset<T>(row, chunk), src + chunk * 16, valid);
  }
  attn::cp_async_commit();
}

// One warp's softmax state over its 16 MMA rows: rows r0 (index 0) and
// r0 + 8 (index 1) of this lane, which belong to tile rows row[0], row[1].
template <int D>
struct WarpState {
  float acc[D / 8][4];
  float m[2];
  float l[2];
  float scale_log2[2];
  int row[2];     // tile row of MMA rows r0, r0 + 8
  int32_t hi[2];  // attended key positions lo..hi of those rows
  int32_t lo[2];
  uint32_t rows = 0;  // tile rows this warp holds (bit mask)
  bool q_f16 = false;
};

// S = Q K^T over kSteps consecutive 16-key steps at `rows` (regions
// region[2k], region[2k + 1] of step k with row masks mask[...]), masked
// per (row, key), one online-softmax update for all of them, O += P V. Two
// steps at once give the warp independent MMA chains and halve the
// softmax's fixed cost per key.
template <class T, bool kF16, int kSteps>
__device__ __forceinline__ void attend_steps(const unsigned char* rows, int lane,
                                             const uint32_t (&qf)[T::kDim / 16][4],
                                             const int32_t (&region)[2 * kSteps],
                                             const uint32_t (&mask)[2 * kSteps],
                                             WarpState<T::kDim>& w) {
  constexpr int D = T::kDim;
  float s[kSteps][2][4];
#pragma unroll
  for (int k = 0; k < kSteps; ++k) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) s[k][nt][0] = s[k][nt][1] = s[k][nt][2] = s[k][nt][3] = 0.0f;
    attn::qk_step<T, kF16>(rows + k * T::kStageBytes, lane, qf, s[k]);
  }
  const int c0 = (lane % 4) * 2;
  float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int k = 0; k < kSteps; ++k) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int32_t key0 = region[2 * k + nt] * attn::page_tokens() + c0;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1;
        const int32_t kpos = key0 + (e & 1);
        const bool in =
            ((mask[2 * k + nt] >> w.row[h]) & 1u) != 0 && kpos >= w.lo[h] && kpos <= w.hi[h];
        const float x = in ? s[k][nt][e] * w.scale_log2[h] : -INFINITY;
        s[k][nt][e] = x;
        tmax[h] = fmaxf(tmax[h], x);
      }
    }
  }
  float m_use[2];
  attn::move_running_max<D>(tmax, w.m, w.l, w.acc, m_use);
#pragma unroll
  for (int k = 0; k < kSteps; ++k) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[k][nt][e] = exp2f(s[k][nt][e] - m_use[e >> 1]);
        w.l[e >> 1] += s[k][nt][e];
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kSteps; ++k) {
    uint32_t pa[4];
    attn::pack_p<T>(s[k], pa);
    attn::pv_step<T>(rows + k * T::kStageBytes, lane, pa, w.acc);
  }
}

// Every warp's share of one list stage: both 16-key steps at once when its
// rows attend a region of each, one when only one, none otherwise (a
// warp-uniform test).
template <class T, bool kF16, class Smem>
__device__ __forceinline__ void compute_stage_as(const Smem& sm, int32_t i, int32_t length,
                                                 int lane, const uint32_t (&qf)[T::kDim / 16][4],
                                                 WarpState<T::kDim>& w) {
  static_assert(steps_per_stage() == 2, "a stage is two 16-key steps");
  const unsigned char* stage = sm.buffer + (i % Smem::kStages) * Smem::kStageBytes;
  int32_t region[4];
  uint32_t mask[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int32_t e = i * stage_regions() + k;
    mask[k] = e < length ? sm.list_mask[e] : 0u;
    region[k] = e < length ? sm.list_region[e] : 0;
  }
  const bool first = ((mask[0] | mask[1]) & w.rows) != 0;
  const bool second = ((mask[2] | mask[3]) & w.rows) != 0;
  if (first && second) {
    attend_steps<T, kF16, 2>(stage, lane, qf, region, mask, w);
  } else if (first) {
    const int32_t r[2] = {region[0], region[1]};
    const uint32_t m[2] = {mask[0], mask[1]};
    attend_steps<T, kF16, 1>(stage, lane, qf, r, m, w);
  } else if (second) {
    const int32_t r[2] = {region[2], region[3]};
    const uint32_t m[2] = {mask[2], mask[3]};
    attend_steps<T, kF16, 1>(stage + T::kStageBytes, lane, qf, r, m, w);
  }
}

template <class T, class Smem>
__device__ __forceinline__ void compute_stage(const Smem& sm, int32_t i, int32_t length, int lane,
                                              const uint32_t (&qf)[T::kDim / 16][4],
                                              WarpState<T::kDim>& w) {
  if (T::kIsFp8 && w.q_f16) {
    compute_stage_as<T, T::kIsFp8>(sm, i, length, lane, qf, w);
  } else {
    compute_stage_as<T, false>(sm, i, length, lane, qf, w);
  }
}

// Streams list stages [0, ceil(length / 4)) through the pipeline: one
// barrier per stage (it also frees the buffer the next copies go to).
template <class T, class Smem>
__device__ void run_window(const PagedAttentionParams& p, const char* kv_head, int32_t length,
                           int32_t key_lo, int32_t key_hi, int lane,
                           const uint32_t (&qf)[T::kDim / 16][4], WarpState<T::kDim>& w, Smem& sm) {
  constexpr int S = Smem::kStages;
  const int32_t stages = (length + stage_regions() - 1) / stage_regions();
#pragma unroll 1
  for (int32_t k = 0; k < S - 1; ++k) {
    if (k < stages) {
      issue_stage<T>(p, kv_head, k, length, key_lo, key_hi, sm);
    } else {
      attn::cp_async_commit();
    }
  }
#pragma unroll 1
  for (int32_t i = 0; i < stages; ++i) {
    attn::cp_async_wait<S - 2>();
    __syncthreads();
    const int32_t ahead = i + S - 1;
    if (ahead < stages) {
      issue_stage<T>(p, kv_head, ahead, length, key_lo, key_hi, sm);
    } else {
      attn::cp_async_commit();
    }
    compute_stage<T>(sm, i, length, lane, qf, w);
  }
  attn::cp_async_wait<0>();
  __syncthreads();
}

}  // namespace step5::cuda::tiled
