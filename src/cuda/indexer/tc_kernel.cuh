// The tensor-core indexer (sm_90a). One warpgroup per CTA; a persistent
// grid. The step's work is a sequence of tiles, request by request, block
// of query rows by block, 64 regions at a time; CTA b takes the b-th even
// share of it. For each tile the warpgroup
//   - has cp.async copies of the next tiles' summaries in flight (page
//     source: the request's block table),
//   - converts the tile's summaries to bf16 A fragments in registers
//     (e4m3 -> bf16 is exact) and multiplies them with the block's index
//     queries, staged once per block as the B operand (mainloop: wgmma
//     m64nNk16, fp32 accumulation),
//   - reduces the heads with the weighted ReLU, writes the scores of every
//     row with C > skip_topk and tracks each row's best score (epilogue).
#pragma once

#include <cub/block/block_scan.cuh>

#include "cuda/attention/ptx.cuh"
#include "cuda/common/numerics.cuh"
#include "cuda/common/score_key.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/indexer/params.h"
#include "cuda/indexer/tc_layout.cuh"

namespace step5::cuda::tc {

using attn::cp_async16;
using attn::cp_async_commit;
using attn::cp_async_wait;
using attn::smem_addr;

constexpr int kThreads = indexer_tc_threads();
constexpr int kRegions = indexer_tc_tile_regions();
constexpr int kStages = indexer_tc_stages();

// A tile of the step's work sequence.
struct TileRef {
  int32_t request;
  int32_t block;  // block of query rows within the request's rows in the launch
  int32_t tile;   // 64-region tile
};

struct RequestRows {
  int32_t first;     // first step row of the request inside the launch's rows
  int32_t count;     // its rows inside the launch's rows
  int32_t last_pos;  // position of the last of them
};

__device__ __forceinline__ RequestRows request_rows(const IndexerParams& p, int32_t r) {
  const int32_t qs = __ldg(p.rows.query_start_loc + r);
  const int32_t qe = __ldg(p.rows.query_start_loc + r + 1);
  const int32_t begin = max(qs, static_cast<int32_t>(p.row_begin));
  const int32_t end = min(qe, static_cast<int32_t>(p.row_begin + p.num_rows));
  RequestRows rr{begin, max(0, end - begin), 0};
  rr.last_pos = __ldg(p.rows.seq_lens + r) - qe + end - 1;
  return rr;
}

// Per-request work (row blocks x region tiles) and its exclusive prefix,
// in shared memory; prefix[R] is the step's total.
__device__ void build_work_table(const IndexerParams& p, int32_t* prefix, int32_t* cmax) {
  using Scan = cub::BlockScan<int32_t, kThreads>;
  __shared__ typename Scan::TempStorage scan;
  const int32_t R = p.rows.num_requests;
  const int32_t per = (R + kThreads - 1) / kThreads;
  const int32_t r0 = min(R, static_cast<int32_t>(threadIdx.x) * per);
  const int32_t r1 = min(R, r0 + per);
  int32_t local = 0;
  for (int32_t r = r0; r < r1; ++r) {
    const RequestRows rr = request_rows(p, r);
    // A row's closed regions, capped at the scores' columns (the plan's
    // capacity); rows at or under skip_topk take every region unscored.
    const int32_t c = rr.count > 0 ? min(max(rr.last_pos, 0) / 8, p.columns) : 0;
    const bool scored = c > 0 && c > p.skip_topk;
    cmax[r] = scored ? c : 0;
    const int32_t blocks = (rr.count + p.rows_per_unit - 1) / p.rows_per_unit;
    prefix[r] = scored ? blocks * ((c + kRegions - 1) / kRegions) : 0;
    local += prefix[r];
  }
  int32_t before = 0;
  Scan(scan).ExclusiveSum(local, before);
  for (int32_t r = r0; r < r1; ++r) {
    const int32_t work = prefix[r];
    prefix[r] = before;
    before += work;
  }
  // The owner of the last request (or thread 0 when there is none) closes
  // the table.
  if ((R > 0 && r0 < r1 && r1 == R) || (R == 0 && threadIdx.x == 0)) prefix[R] = before;
  __syncthreads();
}

// The tile at position `index` of the work sequence.
__device__ __forceinline__ TileRef locate(const int32_t* prefix, const int32_t* cmax, int32_t R,
                                          int32_t index) {
  int32_t lo = 0, hi = R - 1;  // last r with prefix[r] <= index
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if (prefix[mid] <= index) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int32_t tiles = (cmax[lo] + kRegions - 1) / kRegions;
  const int32_t local = index - prefix[lo];
  return {lo, local / tiles, local % tiles};
}

// Byte offsets (into the summary cache) of the 64 regions of tile `ref`,
// -1 past the request's scored range; one per thread of the first 64.
// Looked up one iteration before the tile's copies are issued, so the
// block table's latency is hidden.
__device__ __forceinline__ void lookup_blocks(const IndexerParams& p, const int32_t* cmax,
                                              TileRef ref, int64_t* offsets) {
  const int row = threadIdx.x;
  if (row >= kRegions) return;
  const int32_t j = ref.tile * kRegions + row;
  const int regions_per_block = p.block_size / 8;
  int64_t offset = -1;
  if (j < cmax[ref.request]) {
    const int32_t block =
        __ldg(p.block_table + int64_t{ref.request} * p.block_table_stride + j / regions_per_block);
    offset = int64_t{block} * p.summary_block_stride +
             int64_t{j % regions_per_block} * p.summary_region_stride;
  }
  offsets[row] = offset;
}

// Copies the summaries of one tile into stage buffer `dst` (regions past
// the request's scored range are zero-filled); `offsets` from
// lookup_blocks. Rows are 2^log2_chunks 16-byte chunks (Di a power of two).
template <bool kFp8>
__device__ __forceinline__ void issue_tile(const IndexerParams& p, const int64_t* offsets,
                                           int log2_chunks, uint32_t dst) {
  const int chunks = 1 << log2_chunks;
  const int row_bytes = chunks * 16;
  // A warp copies whole rows: consecutive lanes, consecutive chunks.
  for (int i = threadIdx.x; i < kRegions * chunks; i += kThreads) {
    const int row = i >> log2_chunks, c = i & (chunks - 1);
    const int64_t offset = offsets[row];
    const char* src = static_cast<const char*>(p.summaries) + (offset >= 0 ? offset + c * 16 : 0);
    cp_async16(dst + row * row_bytes + summary_chunk<kFp8>(row, c) * 16, src, offset >= 0);
  }
}

// Stages block `ref.block` of request `ref.request`: its index queries as
// the B operand, weights, closed counts and output rows; resets row_max.
template <int N>
__device__ void stage_block(const IndexerParams& p, const IndexerSmem& L, unsigned char* base,
                            TileRef ref) {
  constexpr int P = N / indexer_tc_heads();
  const RequestRows rr = request_rows(p, ref.request);
  const int32_t row0 = rr.first + ref.block * p.rows_per_unit;
  const int32_t rows = min(p.rows_per_unit, rr.first + rr.count - row0);
  const int G = p.num_groups;
  const int slots = rows * G;
  const int32_t first_pos = rr.last_pos - (rr.first + rr.count - 1 - row0);
  const int chunks = p.index_dim / 8;  // 16-byte source chunks per query row
  for (int i = threadIdx.x; i < N * chunks; i += kThreads) {
    const int n = i / chunks, c = i % chunks;
    const int h = n / P, slot = n % P;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (h < p.index_heads && slot < slots) {
      const int64_t t = row0 + slot / G;
      v = *reinterpret_cast<const uint4*>(p.index_query + t * p.query_stride_t +
                                          (slot % G) * p.query_stride_g + h * p.query_stride_h +
                                          c * 8);
    }
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      *reinterpret_cast<uint32_t*>(base + L.query + query_offset(N, n, kappa_of(c * 8 + 2 * k))) =
          words[k];
    }
  }
  float* weight = reinterpret_cast<float*>(base + L.weight);
  for (int i = threadIdx.x; i < indexer_tc_heads() * P; i += kThreads) {
    const int h = i / P, slot = i % P;
    float w = 0.0f;
    if (h < p.index_heads && slot < slots) {
      w = __ldg(p.index_weight + (row0 + slot / G) * p.weight_stride_t +
                (slot % G) * p.weight_stride_g + h);
    }
    weight[i] = w;
  }
  int32_t* closed = reinterpret_cast<int32_t*>(base + L.closed);
  int64_t* out_row = reinterpret_cast<int64_t*>(base + L.out_row);
  uint32_t* row_max = reinterpret_cast<uint32_t*>(base + L.row_max);
  int32_t* max_index = reinterpret_cast<int32_t*>(base + L.max_index);
  for (int slot = threadIdx.x; slot < P; slot += kThreads) {
    int32_t c = 0;
    int64_t local = 0;
    if (slot < slots) {
      const int32_t pos = first_pos + slot / G;
      c = min(max(pos, 0) / 8, p.columns);
      if (c <= p.skip_topk) c = 0;
      local = row0 + slot / G - p.row_begin;
    }
    closed[slot] = c;
    out_row[slot] = local * p.scores_stride_t + (slot % G) * p.scores_stride_g;
    max_index[slot] = static_cast<int32_t>(local * G + slot % G);
    row_max[slot] = 0;
  }
  wgmma::fence_proxy_async_smem();
  __syncthreads();
}

// Adds the block's best keys to the global row maxima.
template <int N>
__device__ void flush_row_max(const IndexerParams& p, const IndexerSmem& L,
                              const unsigned char* base) {
  constexpr int P = N / indexer_tc_heads();
  if (p.row_max == nullptr) return;
  const int32_t* closed = reinterpret_cast<const int32_t*>(base + L.closed);
  const int32_t* max_index = reinterpret_cast<const int32_t*>(base + L.max_index);
  const uint32_t* row_max = reinterpret_cast<const uint32_t*>(base + L.row_max);
  for (int slot = threadIdx.x; slot < P; slot += kThreads) {
    if (closed[slot] != 0) atomicMax(p.row_max + max_index[slot], row_max[slot]);
  }
}

// A fragments of atom `a` (four k-steps) for rows row0 and row0 + 8 of the
// stage at `stage`, converted to bf16.
template <bool kFp8>
__device__ __forceinline__ void load_a(const unsigned char* stage, int row_bytes, int row0, int t,
                                       int a, uint32_t (&af)[4][4]) {
  const unsigned char* r0 = stage + row0 * row_bytes;
  const unsigned char* r1 = r0 + 8 * row_bytes;
  if constexpr (kFp8) {
    const int c = summary_chunk<true>(row0, 4 * a + t);  // rows row0, row0+8 share parity
    const uint4 x0 = *reinterpret_cast<const uint4*>(r0 + c * 16);
    const uint4 x1 = *reinterpret_cast<const uint4*>(r1 + c * 16);
    const uint32_t w0[4] = {x0.x, x0.y, x0.z, x0.w};
    const uint32_t w1[4] = {x1.x, x1.y, x1.z, x1.w};
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      af[s][0] = cuda::e4m3x2_to_bf16x2(w0[s]);
      af[s][1] = cuda::e4m3x2_to_bf16x2(w1[s]);
      af[s][2] = cuda::e4m3x2_to_bf16x2(w0[s] >> 16);
      af[s][3] = cuda::e4m3x2_to_bf16x2(w1[s] >> 16);
    }
  } else {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int c = summary_chunk<false>(row0, 8 * a + 2 * t + half);
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

template <int N, bool kFp8>
__device__ __forceinline__ void mma_atom(const unsigned char* stage, int row_bytes, int row0, int t,
                                         int a, uint32_t query_addr, uint32_t (&af)[4][4],
                                         float (&acc)[N / 2]) {
  if (a >= 2) wgmma::wait_group<1>();  // the group that last read `af` is done
  load_a<kFp8>(stage, row_bytes, row0, t, a, af);
  wgmma::fence();
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint64_t desc = wgmma::sw128_kmajor_desc(query_addr + a * N * 128 + s * 32);
    wgmma::WgmmaRs<N>::mma(acc, af[s], desc, (a | s) != 0 ? 1 : 0);
  }
  wgmma::commit_group();
}

template <int N>
__device__ __forceinline__ void epilogue(const IndexerParams& p, const IndexerSmem& L,
                                         unsigned char* base, int32_t tile, int warp, int lane,
                                         const float (&acc)[N / 2]) {
  constexpr int P = N / indexer_tc_heads();
  const int g = lane / 4, t = lane % 4;
  const float* weight = reinterpret_cast<const float*>(base + L.weight);
  const int32_t* closed = reinterpret_cast<const int32_t*>(base + L.closed);
  const int64_t* out_row = reinterpret_cast<const int64_t*>(base + L.out_row);
  uint32_t* row_max = reinterpret_cast<uint32_t*>(base + L.row_max);
#pragma unroll
  for (int jj = 0; jj < P / 8; ++jj) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int slot = 8 * jj + 2 * t + e;
      const int32_t c = closed[slot];
      float w[indexer_tc_heads()];
#pragma unroll
      for (int h = 0; h < indexer_tc_heads(); ++h) w[h] = weight[h * P + slot];
      uint32_t best = 0;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int32_t j = tile * kRegions + 16 * warp + g + 8 * half;
        float score = 0.0f;
#pragma unroll
        for (int h = 0; h < indexer_tc_heads(); ++h) {
          score += w[h] * fmaxf(acc[4 * (h * (P / 8) + jj) + 2 * half + e], 0.0f);
        }
        if (j < c) {
          p.scores[out_row[slot] + j] = score;
          best = max(best, score_key(score));
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
  constexpr bool kFp8 = Storage::kFp8;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* base = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  const IndexerSmem L = indexer_smem_layout(N, p.index_dim, kFp8 ? 1 : 2, p.rows.num_requests);
  int32_t* prefix = reinterpret_cast<int32_t*>(base + L.prefix);
  int32_t* cmax = reinterpret_cast<int32_t*>(base + L.cmax);
  const int32_t R = p.rows.num_requests;
  build_work_table(p, prefix, cmax);
  const int32_t total = prefix[R];
  const int32_t begin = static_cast<int32_t>(int64_t{total} * blockIdx.x / gridDim.x);
  const int32_t end = static_cast<int32_t>(int64_t{total} * (blockIdx.x + 1) / gridDim.x);
  if (begin >= end) return;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = 16 * warp + lane / 4;  // A rows row0 and row0 + 8 of each tile
  const int row_bytes = p.index_dim * (kFp8 ? 1 : 2);
  const uint32_t stages = smem_addr(base + L.stages);
  const uint32_t query_addr = smem_addr(base + L.query);
  const int atoms = p.index_dim / 64;

  // Block ids of tiles in flight: slot t % kStages holds tile t's, looked
  // up an iteration before tile t is issued.
  int64_t* offsets = reinterpret_cast<int64_t*>(base + L.blocks);
  auto blocks_of = [&](int32_t index) { return offsets + ((index - begin) % kStages) * kRegions; };
  const int log2_chunks = 31 - __clz(row_bytes / 16);

  // Prologue: the first kStages - 1 tiles in flight, the next one looked up.
  for (int s = 0; s < kStages && begin + s < end; ++s) {
    lookup_blocks(p, cmax, locate(prefix, cmax, R, begin + s), blocks_of(begin + s));
  }
  __syncthreads();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (begin + s < end) {
      issue_tile<kFp8>(p, blocks_of(begin + s), log2_chunks, stages + s * L.tile_bytes);
    }
    cp_async_commit();
  }

  float acc[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] = 0.0f;
  uint32_t af0[4][4], af1[4][4];
  TileRef current{-1, -1, -1};
  for (int32_t index = begin; index < end; ++index) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // the tile landed for every thread; stage (index-1) is free
    const int32_t ahead = index + kStages - 1;
    if (ahead < end) {
      issue_tile<kFp8>(p, blocks_of(ahead), log2_chunks,
                       stages + ((ahead - begin) % kStages) * L.tile_bytes);
    }
    cp_async_commit();
    // Tile ahead + 1 reuses the slot of tile index, issued long ago.
    if (ahead + 1 < end) {
      lookup_blocks(p, cmax, locate(prefix, cmax, R, ahead + 1), blocks_of(ahead + 1));
    }

    const TileRef ref = locate(prefix, cmax, R, index);
    if (ref.request != current.request || ref.block != current.block) {
      if (current.request >= 0) flush_row_max<N>(p, L, base);
      stage_block<N>(p, L, base, ref);
      current = ref;
    }
    const unsigned char* stage = base + L.stages + ((index - begin) % kStages) * L.tile_bytes;
    for (int a = 0; a < atoms; a += 2) {
      mma_atom<N, kFp8>(stage, row_bytes, row0, lane % 4, a, query_addr, af0, acc);
      if (a + 1 < atoms) {
        mma_atom<N, kFp8>(stage, row_bytes, row0, lane % 4, a + 1, query_addr, af1, acc);
      }
    }
    wgmma::wait_group<0>();
    epilogue<N>(p, L, base, ref.tile, warp, lane, acc);
  }
  __syncthreads();
  flush_row_max<N>(p, L, base);
}

}  // namespace step5::cuda::tc
