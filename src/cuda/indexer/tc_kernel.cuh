// The tensor-core indexer (sm_90a). One warpgroup per CTA; a persistent
// grid. The step's work is a sequence of tiles, request by request, block
// of query rows by block, 64 or 128 regions at a time; CTA b takes the b-th
// even share of it. For each tile the warpgroup
//   - has bulk copies of the next tiles' summaries in flight (one per run
//     of a block's regions, completing on the stage's mbarrier), their
//     block-table loads one tile further ahead, overlapping this tile's
//     MMAs (page source, tc_stage.cuh),
//   - converts the tile's summaries to A fragments in registers and
//     multiplies them with the block's index queries, staged once per block
//     as the B operand (mainloop: wgmma m64nNk16, fp32 accumulation). fp8
//     summaries convert to f16 in one instruction per pair; when the block's
//     index queries are exact in f16 (each row scaled by a power of two),
//     the MMA runs in f16, else both sides go to bf16 (e4m3 -> bf16 is
//     exact too, five instructions per pair),
//   - reduces the heads with the weighted ReLU, writes the scores of every
//     row with C > skip_topk and tracks each row's best score (epilogue).
#pragma once

#include "cuda/attention/ptx.cuh"
#include "cuda/common/numerics.cuh"
#include "cuda/common/score_key.cuh"
#include "cuda/indexer/tc_stage.cuh"

namespace step5::cuda::tc {

// A fragments of atom `a` (four k-steps) for rows row0 and row0 + 8 of the
// stage at `stage` (rows `row_bytes` apart), as bf16 (kF16 false) or f16
// (fp8 summaries only).
template <bool kFp8, bool kF16>
__device__ __forceinline__ void load_a(const unsigned char* stage, int row_bytes, int row0, int t,
                                       int a, uint32_t (&af)[4][4]) {
  const unsigned char* r0 = stage + row0 * row_bytes;
  const unsigned char* r1 = r0 + 8 * row_bytes;
  if constexpr (kFp8) {
    const int c = 4 * a + t;
    const uint4 x0 = *reinterpret_cast<const uint4*>(r0 + c * 16);
    const uint4 x1 = *reinterpret_cast<const uint4*>(r1 + c * 16);
    const uint32_t w0[4] = {x0.x, x0.y, x0.z, x0.w};
    const uint32_t w1[4] = {x1.x, x1.y, x1.z, x1.w};
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      if constexpr (kF16) {
        af[s][0] = e4m3x2_to_f16x2(w0[s]);
        af[s][1] = e4m3x2_to_f16x2(w1[s]);
        af[s][2] = e4m3x2_hi_to_f16x2(w0[s]);
        af[s][3] = e4m3x2_hi_to_f16x2(w1[s]);
      } else {
        af[s][0] = e4m3x2_to_bf16x2(w0[s]);
        af[s][1] = e4m3x2_to_bf16x2(w1[s]);
        af[s][2] = e4m3x2_to_bf16x2(w0[s] >> 16);
        af[s][3] = e4m3x2_to_bf16x2(w1[s] >> 16);
      }
    }
  } else {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int c = 8 * a + 2 * t + half;
      const uint4 x0 = *reinterpret_cast<const uint4*>(r0 + c * 16);
      const uint4 x1 = *reinterpret_cast<const uint4*>(r1 + c * 16);
      af[2 * half][0] = x0.x;
      af[2 * half][1] = x1.x;
      af[2 * half][2] = x0.y;
      af[2 * half][3] = x1.y;
      af[2 * half + 1][0] = x0.z;
      af[2 * half + 1][1] = x1.z;
      af[2 * half + 1][2] = x0.w;
      af[2 * half + 1][3] = x1.w;
    }
  }
}

// One atom (64 of Di) of every M-tile: A fragments into `af` (the other
// buffer may still be read by the previous atom's wgmmas), then 4 k-steps.
template <int N, int M, bool kFp8, bool kF16>
__device__ __forceinline__ void mma_atom(const unsigned char* stage, int row_bytes, int row0, int t,
                                         int a, uint32_t query_addr, uint32_t (&af)[M][4][4],
                                         float (&acc)[M][N / 2]) {
  if (a >= 2) wgmma::wait_group<1>();  // the group that last read `af` is done
#pragma unroll
  for (int m = 0; m < M; ++m) {
    load_a<kFp8, kF16>(stage, row_bytes, row0 + 64 * m, t, a, af[m]);
  }
  wgmma::fence();
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint64_t desc = wgmma::sw128_kmajor_desc(query_addr + a * N * 128 + s * 32);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      wgmma::WgmmaRs<N, kF16>::mma(acc[m], af[m][s], desc, (a | s) != 0 ? 1 : 0);
    }
  }
  wgmma::commit_group();
}

template <int N, int M, bool kFp8, bool kF16>
__device__ __forceinline__ void mainloop(const unsigned char* stage, int row_bytes, int row0, int t,
                                         int atoms, uint32_t query_addr, float (&acc)[M][N / 2]) {
  uint32_t af0[M][4][4], af1[M][4][4];
  for (int a = 0; a < atoms; a += 2) {
    mma_atom<N, M, kFp8, kF16>(stage, row_bytes, row0, t, a, query_addr, af0, acc);
    if (a + 1 < atoms) {
      mma_atom<N, M, kFp8, kF16>(stage, row_bytes, row0, t, a + 1, query_addr, af1, acc);
    }
  }
  wgmma::wait_group<0>();
}

template <int N, int M>
__device__ __forceinline__ void epilogue(const IndexerParams& p, const IndexerSmem& L,
                                         unsigned char* base, int32_t first_region, int warp,
                                         int lane, const float (&acc)[M][N / 2]) {
  constexpr int P = N / indexer_tc_heads();
  constexpr int H = indexer_tc_heads();
  const int g = lane / 4, t = lane % 4;
  const float* weight = reinterpret_cast<const float*>(base + L.weight);
  const float* qscale = reinterpret_cast<const float*>(base + L.qscale);
  const int32_t* closed = reinterpret_cast<const int32_t*>(base + L.closed);
  const int64_t* out_row = reinterpret_cast<const int64_t*>(base + L.out_row);
  uint32_t* row_max = reinterpret_cast<uint32_t*>(base + L.row_max);
#pragma unroll
  for (int jj = 0; jj < P / 8; ++jj) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int slot = 8 * jj + 2 * t + e;
      const int32_t c = closed[slot];
      const int64_t out = out_row[slot];
      float w[H], q[H];
#pragma unroll
      for (int h = 0; h < H; ++h) {
        w[h] = weight[h * P + slot];
        q[h] = qscale[h * P + slot];
      }
      uint32_t best = 0;
#pragma unroll
      for (int m = 0; m < M; ++m) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int32_t j = first_region + 64 * m + 16 * warp + g + 8 * half;
          float score = 0.0f;
#pragma unroll
          for (int h = 0; h < H; ++h) {
            score += w[h] * (q[h] * fmaxf(acc[m][4 * (h * (P / 8) + jj) + 2 * half + e], 0.0f));
          }
          if (j < c) {
            p.scores[out + j] = score;
            best = max(best, score_key(score));
          }
        }
      }
      best = max(best, __shfl_xor_sync(0xffffffffu, best, 4));
      best = max(best, __shfl_xor_sync(0xffffffffu, best, 8));
      best = max(best, __shfl_xor_sync(0xffffffffu, best, 16));
      if (g == 0 && best != 0) atomicMax(row_max + slot, best);
    }
  }
}

template <int N, class Storage>
__global__ void __launch_bounds__(kThreads, 1) indexer_tc_kernel(const IndexerParams p) {
  // wgmma exists only on sm_90a: every other device target (the compute_80
  // PTX, sm_100a) gets a body that traps, so the file compiles for them and
  // the module loads. The schedule never picks this kernel there
  // (common/arch.h); a launch anyway fails loudly instead of computing garbage.
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  (void)p;
  __trap();
#else
  constexpr bool kFp8 = Storage::kFp8;
  constexpr int M = mtiles(N);
  constexpr int kRegions = tile_regions(N);
  extern __shared__ unsigned char smem_raw[];
  // Aligned by pointer arithmetic on the shared array (not through an
  // integer), so the compiler still knows every access below is shared.
  unsigned char* base = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  const IndexerSmem L =
      indexer_smem_layout(N, p.index_dim, kFp8 ? 1 : 2, p.rows.num_requests, p.stages);
  int32_t* prefix = reinterpret_cast<int32_t*>(base + L.prefix);
  int32_t* cmax = reinterpret_cast<int32_t*>(base + L.cmax);
  const int32_t R = p.rows.num_requests;
  build_work_table(p, kRegions, prefix, cmax);
  const int32_t total = prefix[R];
  const int32_t begin = static_cast<int32_t>(int64_t{total} * blockIdx.x / gridDim.x);
  const int32_t end = static_cast<int32_t>(int64_t{total} * (blockIdx.x + 1) / gridDim.x);
  if (begin >= end) return;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = 16 * warp + lane / 4;  // A rows row0 and row0 + 8 of each M-tile
  const uint32_t query_addr = smem_addr(base + L.query);
  const int atoms = p.index_dim / 64;
  const int stages = p.stages;
  const Stages pipe{stages, smem_addr(base + L.stages), L.tile_bytes, smem_addr(base + L.full)};
  const int row_bytes = p.index_dim * (kFp8 ? 1 : 2);
  const bool packed = p.summary_region_stride == row_bytes;
  // Summary offsets and copy runs of tiles in flight, a slot per stage:
  // tile i's are looked up an iteration before tile i is issued.
  int64_t* offsets = reinterpret_cast<int64_t*>(base + L.offsets);
  int32_t* runs = reinterpret_cast<int32_t*>(base + L.runs);
  auto offsets_of = [&](int stage) { return offsets + stage * kRegions; };
  auto runs_of = [&](int stage) { return runs + stage * kRegions; };

  // Prologue: the stages' barriers, the first stages - 1 tiles in flight,
  // the next one looked up.
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) bulk::init(pipe.full_bar(s), kThreads);
    bulk::fence_init();
  }
  Cursor look = Cursor::at(prefix, cmax, R, kRegions, begin);
  for (int s = 0; s < stages && begin + s < end; ++s) {
    store_offset(p, fetch_lookup(p, cmax, look, kRegions, packed), kRegions, offsets_of(s),
                 runs_of(s));
    look.advance(prefix, cmax, R, kRegions);
  }
  __syncthreads();
  for (int s = 0; s < stages - 1; ++s) {
    if (begin + s < end) issue_tile(p, offsets_of(s), runs_of(s), kRegions, row_bytes, pipe, s);
  }

  float acc[M][N / 2];
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int i = 0; i < N / 2; ++i) acc[m][i] = 0.0f;
  }
  Cursor cur = Cursor::at(prefix, cmax, R, kRegions, begin);
  Cursor staged;  // request -1: nothing staged yet
  bool use_f16 = false;
  StageCursor read;  // the stage of tile `index`
  for (int32_t index = begin; index < end; ++index) {
    bulk::wait(pipe.full_bar(read.stage), read.phase);  // tile `index` landed
    __syncthreads();  // every thread is done with the previous stage
    // Tile ahead = index + stages - 1 goes into the stage read last
    // iteration; tile ahead + 1 reuses this one's slot of offsets, used
    // long ago: its block ids load during this tile's MMAs and are stored
    // after them.
    const int32_t ahead = index + stages - 1;
    if (ahead < end) {
      const int s = pipe.previous(read.stage);
      issue_tile(p, offsets_of(s), runs_of(s), kRegions, row_bytes, pipe, s);
    }
    PendingLookup next;
    if (ahead + 1 < end) {
      next = fetch_lookup(p, cmax, look, kRegions, packed);
      look.advance(prefix, cmax, R, kRegions);
    }

    if (cur.request != staged.request || cur.block != staged.block) {
      if (staged.request >= 0) flush_row_max<N>(p, L, base);
      use_f16 = stage_block<N>(p, L, base, cur, kFp8);
      staged = cur;
    }
    const unsigned char* stage = base + L.stages + read.stage * L.tile_bytes;
    if (kFp8 && use_f16) {
      mainloop<N, M, kFp8, kFp8>(stage, row_bytes, row0, lane % 4, atoms, query_addr, acc);
    } else {
      mainloop<N, M, kFp8, false>(stage, row_bytes, row0, lane % 4, atoms, query_addr, acc);
    }
    epilogue<N, M>(p, L, base, cur.tile * kRegions, warp, lane, acc);
    cur.advance(prefix, cmax, R, kRegions);
    if (ahead + 1 < end) {
      store_offset(p, next, kRegions, offsets_of(read.stage), runs_of(read.stage));
    }
    read.advance(stages);
  }
  __syncthreads();
  flush_row_max<N>(p, L, base);
#endif
}

}  // namespace step5::cuda::tc
