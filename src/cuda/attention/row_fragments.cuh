// Register fragments of the row kernel (paged_kernel.cuh): keys on the M
// side of mma.sync m16n8k16, the group's heads on N.
//
// A decode or verify row has H/G query heads per group, 8 in the Step5
// shapes. With heads on M (fragments.cuh, the tile kernel's layout) half
// of every 16-row tile is padding: half the MMAs, half the softmax and
// twice the accumulator registers go to rows that do not exist, and with
// ~250 registers live the compiler chains each conversion of an fp8 page
// into the MMA that reads it. Transposed, a step computes
//   S^T = K Q^T   (M = 16 keys, N = 8 heads per tile, K = head dim),
//   O^T += V^T P^T (M = 16 head dims, N = 8 heads, K = 16 keys),
// in kNT = ceil(H/G / 8) head tiles, so one tile for H/G <= 8.
//
// Lane (g, t) = (lane / 4, lane % 4) holds, per head tile nt:
//   - Q^T as B fragments: head 8 nt + g, columns (2t, 2t+1) and
//     (2t+8, 2t+9) of each k-step (the same column order as fragments.cuh,
//     whose K staging and fp8 permutation this file reuses unchanged);
//   - S^T accumulators s[nt][e]: key g (e < 2) or g + 8 (e >= 2), head
//     8 nt + 2t + (e & 1); a head's softmax reduces over the 8 lanes of
//     one t (shuffles across g);
//   - P^T as B fragments: head 8 nt + g, keys (2t, 2t+1) and (2t+8, 2t+9):
//     the S^T layout transposed per 8 x 8 block (movmatrix);
//   - O^T accumulators acc[mt][nt][e]: head 8 nt + 2t + (e & 1), head
//     dimension row_output_dim (two rows g and g + 8 of M-tile mt).
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/attention/fragments.cuh"
#include "cuda/attention/ptx.cuh"
#include "cuda/attention/softmax.cuh"
#include "cuda/common/numerics.cuh"

namespace step5::cuda::attn {

// Head tiles of 8 for `heads` heads per group (1..16).
constexpr int row_head_tiles(int heads) {
  return heads <= 8 ? 1 : 2;
}

// 8 x 8 transpose of 16-bit values across the warp: lane (g, t) gives
// (row g, columns 2t, 2t+1) and gets (row g, columns 2t, 2t+1) of the
// transposed matrix.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// Q of heads 8 nt + g as B fragments (columns in fragment_column order);
// heads >= `heads` are zero.
template <class T, int kNT>
__device__ __forceinline__ void load_q_cols(const uint16_t* q, int64_t head_stride, int heads,
                                            int lane, uint32_t (&qb)[T::kDim / 16][kNT][2]) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int kk = 0; kk < T::kDim / 16; ++kk) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const int head = 8 * nt + g;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int col = fragment_column<T>(kk, 2 * i, t);
        qb[kk][nt][i] = head < heads
                            ? __ldg(reinterpret_cast<const uint32_t*>(q + head * head_stride + col))
                            : 0u;
      }
    }
  }
}

// fp8 KV: Q's fragments (bf16) to f16 when every head, scaled by a power
// of two, is exact in f16; `col_scale[nt][e]` then undoes the scale of
// S^T column 2t + e of tile nt (head 8 nt + 2t + e, whose Q lanes
// 4 (2t + e) .. + 3 hold). Decided per warp (every warp holds the same Q).
template <class T, int kNT>
__device__ __forceinline__ bool q_cols_to_f16(int lane, uint32_t (&qb)[T::kDim / 16][kNT][2],
                                              float (&col_scale)[kNT][2]) {
  int top[kNT];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) top[nt] = 0;
#pragma unroll
  for (int kk = 0; kk < T::kDim / 16; ++kk) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      top[nt] = max(top[nt], max(max_exponent(qb[kk][nt][0]), max_exponent(qb[kk][nt][1])));
    }
  }
  bool exact = true;
  int shift[kNT];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    top[nt] = max(top[nt], __shfl_xor_sync(0xffffffffu, top[nt], 1));
    top[nt] = max(top[nt], __shfl_xor_sync(0xffffffffu, top[nt], 2));
    shift[nt] = row_shift(top[nt]);
    exact = exact && shift[nt] <= 100;
  }
#pragma unroll
  for (int kk = 0; kk < T::kDim / 16; ++kk) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        exact = exact && f16_exact(qb[kk][nt][i] & 0xffffu, top[nt]) &&
                f16_exact(qb[kk][nt][i] >> 16, top[nt]);
      }
    }
  }
  if (!__all_sync(0xffffffffu, exact)) return false;
#pragma unroll
  for (int kk = 0; kk < T::kDim / 16; ++kk) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int i = 0; i < 2; ++i) qb[kk][nt][i] = scaled_f16x2(qb[kk][nt][i], pow2f(shift[nt]));
    }
  }
  const int t = lane % 4;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      col_scale[nt][e] = pow2f(-__shfl_sync(0xffffffffu, shift[nt], 4 * (2 * t + e)));
    }
  }
  return true;
}

// s[nt] = (K Q^T) of the step's 16 keys for head tile nt. Q as f16
// fragments when kF16 (fp8 KV only), else bf16. Even and odd k-steps
// accumulate apart and are added at the end: two MMA chains in flight
// instead of one.
template <class T, int kNT, bool kF16>
__device__ __forceinline__ void kq_step(const unsigned char* rows, int lane,
                                        const uint32_t (&qb)[T::kDim / 16][kNT][2],
                                        float (&s)[kNT][4]) {
  constexpr int D = T::kDim;
  float part[2][kNT][4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) part[h][nt][e] = 0.0f;
    }
  }
  if constexpr (T::kIsFp8) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < D / 64; ++i) {
      const uint4 x0 = *reinterpret_cast<const uint4*>(rows + stage_chunk_offset<T>(g, 4 * i + t));
      const uint4 x1 =
          *reinterpret_cast<const uint4*>(rows + stage_chunk_offset<T>(g + 8, 4 * i + t));
      const uint32_t w0[4] = {x0.x, x0.y, x0.z, x0.w};
      const uint32_t w1[4] = {x1.x, x1.y, x1.z, x1.w};
#pragma unroll
      for (int sk = 0; sk < 4; ++sk) {
        uint32_t a[4];
        if constexpr (kF16) {
          a[0] = e4m3x2_to_f16x2(w0[sk]);
          a[1] = e4m3x2_to_f16x2(w1[sk]);
          a[2] = e4m3x2_hi_to_f16x2(w0[sk]);
          a[3] = e4m3x2_hi_to_f16x2(w1[sk]);
        } else {
          a[0] = e4m3x2_to_bf16x2(w0[sk]);
          a[1] = e4m3x2_to_bf16x2(w1[sk]);
          a[2] = e4m3x2_to_bf16x2(w0[sk] >> 16);
          a[3] = e4m3x2_to_bf16x2(w1[sk] >> 16);
        }
        const int kk = 4 * i + sk;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          if constexpr (kF16) {
            mma_f16(part[kk & 1][nt], a, qb[kk][nt][0], qb[kk][nt][1]);
          } else {
            mma_bf16(part[kk & 1][nt], a, qb[kk][nt][0], qb[kk][nt][1]);
          }
        }
      }
    }
  } else {
    // ldmatrix matrix j: keys 8 (j >> 1).., columns 8 (j & 1)..; A wants
    // (keys 0-7, cols 0-7), (keys 8-15, cols 0-7), (keys 0-7, cols 8-15),
    // (keys 8-15, cols 8-15).
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t b[4];
      ldmatrix_x4(b, k_ldmatrix_addr<T>(rows, lane, kk));
      const uint32_t a[4] = {b[0], b[2], b[1], b[3]};
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) mma_bf16(part[kk & 1][nt], a, qb[kk][nt][0], qb[kk][nt][1]);
    }
  }
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] = part[0][nt][e] + part[1][nt][e];
  }
}

// The online softmax's running maximum for the S^T layout: lane (g, t)'s
// heads 8 nt + 2t + e after new logits whose per-lane maximum (over keys g
// and g + 8) is tmax[nt][e]: reduces tmax over the 8 lanes of the head,
// moves the running maximum m, rescales the lane's part of the running sum
// l and, when some head's maximum moved, the accumulators (alpha is exactly
// 1 otherwise). m_use: as advance_running_max (softmax.cuh).
template <int D, int kNT>
__device__ __forceinline__ void move_running_max_cols(float (&tmax)[kNT][2], float (&m)[kNT][2],
                                                      float (&l)[kNT][2],
                                                      float (&acc)[D / 16][kNT][4],
                                                      float (&m_use)[kNT][2]) {
  float alpha[kNT][2];
  bool moved = false;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float x = tmax[nt][e];
      x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
      x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 8));
      x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 16));
      advance_running_max(m[nt][e], x, alpha[nt][e], m_use[nt][e]);
      l[nt][e] *= alpha[nt][e];
      moved = moved || alpha[nt][e] != 1.0f;
    }
  }
  if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
    for (int mt = 0; mt < D / 16; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mt][nt][e] *= alpha[nt][e & 1];
      }
    }
  }
}

// P^T as the B fragments of O^T += V^T P^T: bf16, or f16 of P times
// kFp8PScale for fp8 KV (fragments.cuh). s[nt] holds P at (key g or g + 8,
// heads 2t, 2t+1); one transpose per 8 keys gives (head g, keys 2t, 2t+1).
template <class T, int kNT>
__device__ __forceinline__ void pack_pt(const float (&s)[kNT][4], uint32_t (&pb)[kNT][2]) {
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      pb[nt][h] = movmatrix_trans(pack_p_pair<T>(s[nt][2 * h], s[nt][2 * h + 1]));
    }
  }
}

// acc += V^T P^T over the step's 16 keys; pb is P^T (pack_pt).
template <class T, int kNT>
__device__ __forceinline__ void vp_step(const unsigned char* rows, int lane,
                                        const uint32_t (&pb)[kNT][2],
                                        float (&acc)[T::kDim / 16][kNT][4]) {
  constexpr int D = T::kDim;
  if constexpr (T::kIsFp8) {
    // b[0], b[1]: keys 0-7 / 8-15 of dims d0 = 16 m.., b[2], b[3] of
    // d0 = 16 (m + 1)..; lane (g, t) holds V[2t][d], V[2t][d+1],
    // V[2t+1][d], V[2t+1][d+1] with d = d0 + 2g. Bytes (0, 2) are the A
    // pair (keys 2t, 2t+1) of dimension d, bytes (1, 3) of d + 1: M-tile m
    // takes the even dimensions of d0 = 16 m (rows g) and 16 (m + 1) (rows
    // g + 8), M-tile m + 1 the odd ones.
#pragma unroll
    for (int m = 0; m < D / 16; m += 2) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, v_fp8_ldmatrix_addr<T>(rows, lane, m));
#pragma unroll
      for (int par = 0; par < 2; ++par) {
        const uint32_t sel = par == 0 ? 0x0020u : 0x0031u;
        const uint32_t a[4] = {
            e4m3x2_to_f16x2(__byte_perm(b[0], 0, sel)), e4m3x2_to_f16x2(__byte_perm(b[2], 0, sel)),
            e4m3x2_to_f16x2(__byte_perm(b[1], 0, sel)), e4m3x2_to_f16x2(__byte_perm(b[3], 0, sel))};
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) mma_f16(acc[m + par][nt], a, pb[nt][0], pb[nt][1]);
      }
    }
  } else {
    // Transposed, lane (g, t) holds V[2t][d], V[2t+1][d] of d = its row g.
#pragma unroll
    for (int mt = 0; mt < D / 16; ++mt) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, v_ldmatrix_addr<T>(rows, lane, mt));
      const uint32_t a[4] = {b[0], b[2], b[1], b[3]};
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) mma_bf16(acc[mt][nt], a, pb[nt][0], pb[nt][1]);
    }
  }
}

// Head dimension of O^T accumulator acc[mt][nt][e] for lane row g.
template <class T>
__device__ __forceinline__ int row_output_dim(int mt, int e, int g) {
  if constexpr (T::kIsFp8) {
    return 16 * (mt & ~1) + 16 * (e >> 1) + 2 * g + (mt & 1);
  } else {
    return 16 * mt + 8 * (e >> 1) + g;
  }
}

}  // namespace step5::cuda::attn
