// Register fragments of the mma.sync attention kernels, per storage format:
// where a staged token row's 16-byte chunks live and the order of the head
// dimension's columns (shared by every kernel), and, with the query heads
// on the M side (the portable tile kernel, tile_attention/mainloop.cuh),
// the Q fragments, the S = Q K^T and O += P V steps of one 16-key step,
// and which output column an accumulator holds. The row kernel puts the
// keys on M instead (row_fragments.cuh).
//
// bf16 KV: ldmatrix (K) and ldmatrix.trans (V), identity column order.
// Rows are staged unpadded, chunk c of row r at chunk c ^ (r % 8): the 8
// rows of an ldmatrix land in 8 bank groups. (Rows padded by 16 bytes did
// that too, but then a warp's 512-byte cp.async spans were not 128-byte
// aligned in shared memory, and the copies of such spans read up to twice
// their sectors from L2: ncu on an H200, 33 % of the row kernel's L2
// sectors were excess; swizzled, ncu on an H100 counts none.)
//
// fp8 KV: no second shared-memory pass. Rows are staged raw and converted
// in registers, exactly:
//   - K: the head dimension is permuted consistently in Q and K (a dot
//     product does not care about the order of its terms): for thread
//     t = lane % 4 and k-step kk of atom i = kk / 4, s = kk % 4, MMA
//     columns 2t, 2t+1 hold d = 64 i + 16 t + 4 s + {0, 1} and columns
//     2t+8, 2t+9 hold d + 2, d + 3. One 16-byte load of a key row then
//     gives the thread its B fragments for four k-steps. When each of the
//     CTA's Q rows, scaled by a power of two, is exact in f16 (almost
//     always), Q K^T runs in f16 and K converts in one instruction per pair
//     (the scale comes back out of the logits); otherwise in bf16.
//   - V: ldmatrix.trans on the fp8 rows read as b16 pairs (d, d+1) gives
//     thread (g, t) the bytes V[2t][d], V[2t][d+1], V[2t+1][d],
//     V[2t+1][d+1] with d = d0 + 2g; bytes (0, 2) are its B fragment for
//     the output tile of even d, bytes (1, 3) for the tile of odd d. Output
//     tile 2m + parity holds d = 16 m + 2 n + parity, n = 0..7. P V runs
//     in f16: V converts exactly in one instruction per pair, and P is
//     rounded to f16 (not bf16) after a scale by kFp8PScale = 2^8 that
//     keeps it clear of f16's subnormals; v_scale takes the 2^8 back out.
//     Every p in [2^-22, 1] is then rounded more finely than bf16 would.
//   - Chunk c of key row r is stored at chunk c ^ f(r % 8) (within its
//     group of 8), f(r) = r ^ 4 (r & 1): the 8 rows of an ldmatrix land in
//     8 bank groups, and so do the 16-byte K loads of rows 2m, 2m+1 by
//     threads t = 0..3.
#pragma once

#include <cstdint>

#include "cuda/attention/ptx.cuh"
#include "cuda/attention/tiles.h"
#include "cuda/common/numerics.cuh"

namespace step5::cuda::attn {

// Byte offset of 16-byte chunk `c` of staged token row `row`.
template <class T>
__device__ __forceinline__ int stage_chunk_offset(int row, int c) {
  if constexpr (T::kIsFp8) {
    const int r = row & 7;
    const int f = r ^ ((r & 1) << 2);
    return row * T::kRawPitch + ((c & ~7) | ((c & 7) ^ f)) * 16;
  } else {
    return row * T::kRawPitch + (c ^ (row & 7)) * 16;
  }
}

// Head dimension element held by A/B fragment register `i` (0..3, as in
// mma.sync m16n8k16: i & 2 selects the upper 8 columns) of k-step kk for
// thread t, first of the pair.
template <class T>
__device__ __forceinline__ int fragment_column(int kk, int i, int t) {
  if constexpr (T::kIsFp8) {
    return 64 * (kk / 4) + 16 * t + 4 * (kk % 4) + (i >> 1) * 2;
  } else {
    return kk * 16 + 2 * t + (i >> 1) * 8;
  }
}

// Shared addresses of the ldmatrix reads of a 16-key step (`rows`), for
// lane `lane`; each lane gives one row address of matrix lane / 8.
// bf16 K, k-step kk (columns 16 kk..): matrix j holds keys 8 (j >> 1)..
// and columns 16 kk + 8 (j & 1)...
template <class T>
__device__ __forceinline__ uint32_t k_ldmatrix_addr(const unsigned char* rows, int lane, int kk) {
  const int mi = lane / 8, ri = lane % 8;
  return smem_addr(rows + stage_chunk_offset<T>((mi >> 1) * 8 + ri, 2 * kk + (mi & 1)));
}
// bf16 V, dims 16 mt.. for ldmatrix.trans: matrix j holds keys 8 (j & 1)..
// and dims 16 mt + 8 (j >> 1)...
template <class T>
__device__ __forceinline__ uint32_t v_ldmatrix_addr(const unsigned char* rows, int lane, int mt) {
  const int mi = lane / 8, ri = lane % 8;
  return smem_addr(rows +
                   stage_chunk_offset<T>((mi & 1) * 8 + ri, T::kDim / 8 + 2 * mt + (mi >> 1)));
}
// fp8 V, bytes of dims 16 m .. 16 m + 31 read as b16 pairs, for
// ldmatrix.trans: matrix j holds keys 8 (j & 1).. and the 16 dims from
// 16 (m + (j >> 1)); transposed, lane (g, t) holds V[2t][d], V[2t][d+1],
// V[2t+1][d], V[2t+1][d+1] with d = its matrix's first dim + 2g.
template <class T>
__device__ __forceinline__ uint32_t v_fp8_ldmatrix_addr(const unsigned char* rows, int lane,
                                                        int m) {
  const int mi = lane / 8, ri = lane % 8;
  return smem_addr(rows + stage_chunk_offset<T>((mi & 1) * 8 + ri, T::kDim / 16 + m + (mi >> 1)));
}

// fp8 KV: converts Q's fragments (bf16) to f16 when every row, scaled by a
// power of two, is exact in f16; then `row_scale` undoes the scale of rows
// r0 (0) and r0 + 8 (1). Decided per warp (every warp holds the same Q).
template <class T>
__device__ __forceinline__ bool q_to_f16(int lane, uint32_t (&qf)[T::kDim / 16][4],
                                         float (&row_scale)[2]) {
  int top[2] = {0, 0};
#pragma unroll
  for (int kk = 0; kk < T::kDim / 16; ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) top[i & 1] = max(top[i & 1], max_exponent(qf[kk][i]));
  }
  bool exact = true;
  int shift[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    top[r] = max(top[r], __shfl_xor_sync(0xffffffffu, top[r], 1));
    top[r] = max(top[r], __shfl_xor_sync(0xffffffffu, top[r], 2));
    shift[r] = row_shift(top[r]);
    exact = exact && shift[r] <= 100;
  }
#pragma unroll
  for (int kk = 0; kk < T::kDim / 16; ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      exact = exact && f16_exact(qf[kk][i] & 0xffffu, top[i & 1]) &&
              f16_exact(qf[kk][i] >> 16, top[i & 1]);
    }
  }
  (void)lane;
  if (!__all_sync(0xffffffffu, exact)) return false;
#pragma unroll
  for (int kk = 0; kk < T::kDim / 16; ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) qf[kk][i] = scaled_f16x2(qf[kk][i], pow2f(shift[i & 1]));
  }
  row_scale[0] = pow2f(-shift[0]);
  row_scale[1] = pow2f(-shift[1]);
  return true;
}

// s[nt] = Q K^T for the step's keys 8 nt .. 8 nt + 7 (nt = 0, 1); Q as
// f16 fragments when kF16 (fp8 KV only), else bf16.
template <class T, bool kF16>
__device__ __forceinline__ void qk_step(const unsigned char* rows, int lane,
                                        const uint32_t (&qf)[T::kDim / 16][4], float (&s)[2][4]) {
  constexpr int D = T::kDim;
  if constexpr (T::kIsFp8 && kF16) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int key = 8 * nt + g;
#pragma unroll
      for (int i = 0; i < D / 64; ++i) {
        const uint4 x =
            *reinterpret_cast<const uint4*>(rows + stage_chunk_offset<T>(key, 4 * i + t));
        const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int sk = 0; sk < 4; ++sk) {
          mma_f16(s[nt], qf[4 * i + sk], cuda::e4m3x2_to_f16x2(w[sk]),
                  cuda::e4m3x2_hi_to_f16x2(w[sk]));
        }
      }
    }
  } else if constexpr (T::kIsFp8) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int key = 8 * nt + g;
#pragma unroll
      for (int i = 0; i < D / 64; ++i) {
        const uint4 x =
            *reinterpret_cast<const uint4*>(rows + stage_chunk_offset<T>(key, 4 * i + t));
        const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int sk = 0; sk < 4; ++sk) {
          mma_bf16(s[nt], qf[4 * i + sk], cuda::e4m3x2_to_bf16x2(w[sk]),
                   cuda::e4m3x2_to_bf16x2(w[sk] >> 16));
        }
      }
    }
  } else {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t b[4];
      ldmatrix_x4(b, k_ldmatrix_addr<T>(rows, lane, kk));
      mma_bf16(s[0], qf[kk], b[0], b[1]);
      mma_bf16(s[1], qf[kk], b[2], b[3]);
    }
  }
}

// Scale of P in the fp8 P V product (see above).
constexpr float kFp8PScale = 256.0f;

// Two probabilities as one register of the P operand of P V: bf16, or f16
// of p times kFp8PScale for fp8 KV (the row kernel's P^T as well).
template <class T>
__device__ __forceinline__ uint32_t pack_p_pair(float lo, float hi) {
  if constexpr (T::kIsFp8) {
    const __half2 h = __floats2half2_rn(lo * kFp8PScale, hi * kFp8PScale);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    return pack_bf16x2(lo, hi);
  }
}

// P (the S accumulators after the softmax) as the A fragment of P V.
template <class T>
__device__ __forceinline__ void pack_p(const float (&s)[2][4], uint32_t (&pa)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    pa[i] = pack_p_pair<T>(s[i / 2][2 * (i % 2)], s[i / 2][2 * (i % 2) + 1]);
  }
}

// acc += P V over the step's 16 keys; pa is P as an A fragment (pack_p).
template <class T>
__device__ __forceinline__ void pv_step(const unsigned char* rows, int lane,
                                        const uint32_t (&pa)[4], float (&acc)[T::kDim / 8][4]) {
  constexpr int D = T::kDim;
  if constexpr (T::kIsFp8) {
#pragma unroll
    for (int m = 0; m < D / 16; m += 2) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, v_fp8_ldmatrix_addr<T>(rows, lane, m));
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t lo = b[2 * h], hi = b[2 * h + 1];  // keys 0-7, keys 8-15
        const int tile = 2 * (m + h);
        mma_f16(acc[tile], pa, cuda::e4m3x2_to_f16x2(__byte_perm(lo, 0, 0x0020)),
                cuda::e4m3x2_to_f16x2(__byte_perm(hi, 0, 0x0020)));
        mma_f16(acc[tile + 1], pa, cuda::e4m3x2_to_f16x2(__byte_perm(lo, 0, 0x0031)),
                cuda::e4m3x2_to_f16x2(__byte_perm(hi, 0, 0x0031)));
      }
    }
  } else {
#pragma unroll
    for (int nd = 0; nd < D / 8; nd += 2) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, v_ldmatrix_addr<T>(rows, lane, nd / 2));
      mma_bf16(acc[nd], pa, b[0], b[1]);
      mma_bf16(acc[nd + 1], pa, b[2], b[3]);
    }
  }
}

// Head dimension element of accumulator acc[nd][e] for thread t.
template <class T>
__device__ __forceinline__ int output_column(int nd, int e, int t) {
  if constexpr (T::kIsFp8) {
    return 16 * (nd / 2) + 2 * (2 * t + (e & 1)) + (nd & 1);
  } else {
    return nd * 8 + 2 * t + (e & 1);
  }
}

}  // namespace step5::cuda::attn
