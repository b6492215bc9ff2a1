// The tensor-core indexer (sm_90a). A persistent grid, one CTA per SM,
// warp-specialized. The step's work is a sequence of tiles, request by
// request, block of query rows by block, 64 or 128 regions at a time; CTA b
// takes the b-th even share of it.
//   - The producer warpgroup walks the share tile by tile: looks up the
//     block ids a tile ahead, waits until the tile's stage is free, and
//     starts the summary copies (one bulk copy per run of a block's
//     regions, completing on the stage's full mbarrier) (page source,
//     tc_stage.cuh).
//   - Consumer warpgroup c takes tiles c, c + consumers, ... of the share.
//     When a tile belongs to a new block of rows it stages that block's
//     index queries into its own shared memory; then it waits for the
//     tile, and
//   - converts the tile's summaries to A fragments in registers and
//     multiplies them with the block's index queries, staged once per block
//     as the B operand (mainloop: wgmma m64nNk16, fp32 accumulation). fp8
//     summaries convert to f16 in one instruction per pair; when the block's
//     index queries are exact in f16 (each row scaled by a power of two),
//     the MMA runs in f16, else both sides go to bf16 (e4m3 -> bf16 is
//     exact too, five instructions per pair),
//     releases the stage (empty mbarrier),
//   - reduces the heads with the weighted ReLU, writes the scores of every
//     row with C > skip_topk and tracks each row's best score (epilogue).
#pragma once

#include "cuda/attention/ptx.cuh"
#include "cuda/common/numerics.cuh"
#include "cuda/common/programmatic.cuh"
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

// What the epilogue reads of one slot: its closed count, its scores row,
// and its heads' weights and query scales.
struct SlotValues {
  int32_t closed;
  int64_t out;
  float weight[indexer_tc_heads()];
  float qscale[indexer_tc_heads()];
};

__device__ __forceinline__ SlotValues load_slot(const IndexerSmem& L, const unsigned char* base,
                                                int num_slots, int slot) {
  SlotValues v;
  v.closed = reinterpret_cast<const int32_t*>(base + L.closed)[slot];
  v.out = reinterpret_cast<const int64_t*>(base + L.out_row)[slot];
#pragma unroll
  for (int h = 0; h < indexer_tc_heads(); ++h) {
    v.weight[h] = reinterpret_cast<const float*>(base + L.weight)[h * num_slots + slot];
    v.qscale[h] = reinterpret_cast<const float*>(base + L.qscale)[h * num_slots + slot];
  }
  return v;
}

// The slots a consumer thread serves (8 jj + 2 t + e), read by every tile's
// epilogue. Up to N = 32 (two slots, 22 registers) they stay in registers
// from the block's staging on; beyond that each tile reads them from the
// staged tables in shared memory.
template <int N>
constexpr bool slots_in_registers() {
  return N <= 32;
}

template <int N, bool kResident = slots_in_registers<N>()>
struct ThreadSlots {
  static constexpr int P = N / indexer_tc_heads();
  SlotValues v[P / 8][2];
  __device__ void load(const IndexerSmem& L, const unsigned char* base, int lane) {
#pragma unroll
    for (int jj = 0; jj < P / 8; ++jj) {
#pragma unroll
      for (int e = 0; e < 2; ++e) v[jj][e] = load_slot(L, base, P, 8 * jj + 2 * (lane % 4) + e);
    }
  }
  __device__ SlotValues at(const IndexerSmem&, const unsigned char*, int, int jj, int e) const {
    return v[jj][e];
  }
};

template <int N>
struct ThreadSlots<N, false> {
  static constexpr int P = N / indexer_tc_heads();
  __device__ void load(const IndexerSmem&, const unsigned char*, int) {}
  __device__ SlotValues at(const IndexerSmem& L, const unsigned char* base, int lane, int jj,
                           int e) const {
    return load_slot(L, base, P, 8 * jj + 2 * (lane % 4) + e);
  }
};

// The weighted-ReLU reduction of a tile: writes the scores of the slots'
// rows below their closed count and raises the thread's best order key per
// (jj, e) slot, kept in registers for the whole block (gather_row_max).
template <int N, int M>
__device__ __forceinline__ void epilogue(const IndexerParams& p, const IndexerSmem& L,
                                         const unsigned char* base, const ThreadSlots<N>& slots,
                                         int32_t first_region, int warp, int lane,
                                         const float (&acc)[M][N / 2],
                                         uint32_t (&best)[N / indexer_tc_heads() / 8][2]) {
  constexpr int P = N / indexer_tc_heads();
  constexpr int H = indexer_tc_heads();
  const int g = lane / 4;
#pragma unroll
  for (int jj = 0; jj < P / 8; ++jj) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const SlotValues sv = slots.at(L, base, lane, jj, e);
      const int32_t c = sv.closed;
      const int64_t out = sv.out;
      const float* w = sv.weight;
      const float* q = sv.qscale;
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
            best[jj][e] = max(best[jj][e], score_key(score));
          }
        }
      }
    }
  }
}

// The block's best keys of every slot, from the threads' registers into
// the shared row_max (then zeroes the registers for the next block).
template <int N>
__device__ __forceinline__ void gather_row_max(const IndexerSmem& L, unsigned char* base, int lane,
                                               uint32_t (&best)[N / indexer_tc_heads() / 8][2]) {
  constexpr int P = N / indexer_tc_heads();
  uint32_t* row_max = reinterpret_cast<uint32_t*>(base + L.row_max);
#pragma unroll
  for (int jj = 0; jj < P / 8; ++jj) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      uint32_t b = best[jj][e];
      b = max(b, __shfl_xor_sync(0xffffffffu, b, 4));
      b = max(b, __shfl_xor_sync(0xffffffffu, b, 8));
      b = max(b, __shfl_xor_sync(0xffffffffu, b, 16));
      if (lane / 4 == 0 && b != 0) atomicMax(row_max + 8 * jj + 2 * (lane % 4) + e, b);
      best[jj][e] = 0;
    }
  }
}

template <int N, class Storage>
__global__ void __launch_bounds__(kBlockThreads, 1) indexer_tc_kernel(const IndexerParams p) {
  // wgmma exists only on sm_90a: every other device target (the compute_80
  // PTX, sm_100a) gets a body that traps, so the file compiles for them and
  // the module loads. The schedule never picks this kernel there
  // (common/arch.h); a launch anyway fails loudly instead of computing garbage.
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  (void)p;
  __trap();
#else
  // Launched programmatically, the CTAs may be placed before the kernel
  // before them has ended (when it allowed it): nothing is read before that
  // grid has ended. The selection launched after this one (programmatically)
  // may place its CTAs as these end; it waits for the whole grid before
  // reading.
  wait_for_previous_grid();
  allow_next_grid();
  constexpr bool kFp8 = Storage::kFp8;
  constexpr int M = mtiles(N);
  constexpr int kRegions = tile_regions(N);
  extern __shared__ unsigned char smem_raw[];
  // Aligned by pointer arithmetic on the shared array (not through an
  // integer), so the compiler still knows every access below is shared.
  unsigned char* base = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  const IndexerSmem L =
      indexer_smem_layout(N, p.index_dim, kFp8 ? 1 : 2, p.rows.num_requests, p.consumers, p.stages);
  int32_t* prefix = reinterpret_cast<int32_t*>(base + L.prefix);
  int32_t* cmax = reinterpret_cast<int32_t*>(base + L.cmax);
  RequestRows* requests = reinterpret_cast<RequestRows*>(base + L.requests);
  const int32_t R = p.rows.num_requests;
  build_work_table(p, kRegions, prefix, cmax, requests);
  const int32_t total = prefix[R];
  const int32_t begin = static_cast<int32_t>(int64_t{total} * blockIdx.x / gridDim.x);
  const int32_t end = static_cast<int32_t>(int64_t{total} * (blockIdx.x + 1) / gridDim.x);
  if (begin >= end) return;

  const int stages = p.stages;
  const Stages pipe{stages, smem_addr(base + L.stages), L.tile_bytes, smem_addr(base + L.full),
                    smem_addr(base + L.empty)};
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      bulk::init(pipe.full_bar(s), kThreads);   // every producer thread, with its bytes
      bulk::init(pipe.empty_bar(s), kThreads);  // every thread of the consumer that read it
    }
    bulk::fence_init();
  }
  __syncthreads();

  const int role = threadIdx.x / kThreads;  // 0: producer, 1 + c: consumer c
  const int tid = threadIdx.x % kThreads;
  const int row_bytes = p.index_dim * (kFp8 ? 1 : 2);
  if (role == 0) {
    // Producer: tile by tile, the block ids one tile ahead, then (once the
    // consumer of the stage's previous use released it) the copies.
    wgmma::lower_registers<indexer_tc_producer_registers()>();
    const bool packed = p.summary_region_stride == row_bytes;
    Cursor look = Cursor::at(prefix, cmax, R, kRegions, begin);
    PendingLookup next = fetch_lookup(p, cmax, look, kRegions, packed, tid);
    StageCursor write;
    for (int32_t index = begin; index < end; ++index) {
      const TileRow row = resolve(p, next);
      if (index + 1 < end) {
        look.advance(prefix, cmax, R, kRegions);
        next = fetch_lookup(p, cmax, look, kRegions, packed, tid);
      }
      if (index - begin >= stages) bulk::wait(pipe.empty_bar(write.stage), write.phase ^ 1u);
      issue_tile(p, tid, row, kRegions, row_bytes, pipe, write.stage);
      write.advance(stages);
    }
    return;
  }

  // Consumer c: tiles begin + c, begin + c + consumers, ... As the stage
  // count is a multiple of the consumers (the plan's), these are always
  // stages c, c + consumers, ..., so the consumer waits for every phase of
  // their full barriers in turn and never for one two phases ahead, where
  // the parity would alias.
  wgmma::raise_registers<indexer_tc_consumer_registers()>();
  const int c = role - 1;
  if (c >= p.consumers) return;
  const int bar_id = 1 + c;  // named barrier of this warpgroup (0 is __syncthreads)
  unsigned char* own = base + c * L.consumer_stride;
  const int warp = tid / 32, lane = tid % 32;
  const int row0 = 16 * warp + lane / 4;  // A rows row0 and row0 + 8 of each M-tile
  const uint32_t query_addr = smem_addr(own + L.query);
  const int atoms = p.index_dim / 64;

  uint32_t best[N / indexer_tc_heads() / 8][2] = {};
  Cursor cur;  // the tile at `index` (none when the share has no tile for c)
  if (begin + c < end) cur = Cursor::at(prefix, cmax, R, kRegions, begin + c);
  Cursor staged;         // request -1: nothing staged yet
  ThreadSlots<N> slots;  // of the staged block
  bool use_f16 = false;
  StageCursor read;
  for (int k = 0; k < c; ++k) read.advance(stages);
  for (int32_t index = begin + c; index < end; index += p.consumers) {
    if (cur.request != staged.request || cur.block != staged.block) {
      if (staged.request >= 0) {
        gather_row_max<N>(L, own, lane, best);
        warpgroup_sync(bar_id);  // every warp's keys are in row_max
        flush_row_max<N>(p, L, own, tid);
      }
      use_f16 = stage_block<N>(p, L, own, requests, cur, kFp8, tid, bar_id);
      slots.load(L, own, lane);
      staged = cur;
    }
    bulk::wait(pipe.full_bar(read.stage), read.phase);  // tile `index` landed
    const unsigned char* stage = base + L.stages + read.stage * L.tile_bytes;
    // Per tile, so the accumulators are dead while a block is staged (the
    // first k-step overwrites them).
    float acc[M][N / 2];
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
      for (int i = 0; i < N / 2; ++i) acc[m][i] = 0.0f;
    }
    if (kFp8 && use_f16) {
      mainloop<N, M, kFp8, kFp8>(stage, row_bytes, row0, lane % 4, atoms, query_addr, acc);
    } else {
      mainloop<N, M, kFp8, false>(stage, row_bytes, row0, lane % 4, atoms, query_addr, acc);
    }
    bulk::arrive(pipe.empty_bar(read.stage));  // this thread's reads of the stage are done
    epilogue<N, M>(p, L, own, slots, cur.tile * kRegions, warp, lane, acc, best);
    for (int k = 0; k < p.consumers; ++k) {
      cur.advance(prefix, cmax, R, kRegions);
      read.advance(stages);
    }
  }
  if (staged.request >= 0) {
    gather_row_max<N>(L, own, lane, best);
    warpgroup_sync(bar_id);
    flush_row_max<N>(p, L, own, tid);
  }
#endif
}

}  // namespace step5::cuda::tc
