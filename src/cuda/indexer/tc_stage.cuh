// Page source and staging of the tensor-core indexer: the step's work
// table, the walk over it, block-table lookups and summary copies (the
// producer warpgroup's), and the index queries of a block of rows as the B
// operand (each consumer warpgroup's own).
#pragma once

#include <cub/block/block_scan.cuh>

#include "cuda/attention/ptx.cuh"
#include "cuda/common/bulk_copy.cuh"
#include "cuda/common/numerics.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/indexer/params.h"
#include "cuda/indexer/tc_layout.cuh"

namespace step5::cuda::tc {

using attn::smem_addr;

constexpr int kThreads = indexer_tc_threads();  // one warpgroup
constexpr int kBlockThreads = indexer_tc_block_threads();

// Barrier of one warpgroup (named barrier `id`, 128 threads), for the
// consumers, which must not wait for each other.
__device__ __forceinline__ void warpgroup_sync(int id) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory");
}
// The same barrier, returning whether `pred` held on every thread.
__device__ __forceinline__ bool warpgroup_sync_and(int id, bool pred) {
  uint32_t all;
  asm volatile(
      "{\n"
      ".reg .pred p, q;\n"
      "setp.ne.u32 p, %1, 0;\n"
      "bar.red.and.pred q, %2, 128, p;\n"
      "selp.u32 %0, 1, 0, q;\n"
      "}\n"
      : "=r"(all)
      : "r"(static_cast<uint32_t>(pred)), "r"(id)
      : "memory");
  return all != 0;
}

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
// in shared memory; prefix[R] is the step's total. Each request's rows go
// to `requests`, where block stagings read them instead of loading them
// again from global memory while the summary copies stream.
__device__ void build_work_table(const IndexerParams& p, int regions, int32_t* prefix,
                                 int32_t* cmax, RequestRows* requests) {
  using Scan = cub::BlockScan<int32_t, kBlockThreads>;
  __shared__ typename Scan::TempStorage scan;
  const int32_t R = p.rows.num_requests;
  const int32_t per = (R + kBlockThreads - 1) / kBlockThreads;
  const int32_t r0 = min(R, static_cast<int32_t>(threadIdx.x) * per);
  const int32_t r1 = min(R, r0 + per);
  int32_t local = 0;
  for (int32_t r = r0; r < r1; ++r) {
    const RequestRows rr = request_rows(p, r);
    requests[r] = rr;
    // A row's closed regions, capped at the scores' columns (the plan's
    // capacity); rows at or under skip_topk take every region unscored.
    const int32_t c = rr.count > 0 ? min(max(rr.last_pos, 0) / 8, p.columns) : 0;
    const bool scored = c > 0 && c > p.skip_topk;
    cmax[r] = scored ? c : 0;
    const int32_t blocks = (rr.count + p.rows_per_unit - 1) / p.rows_per_unit;
    prefix[r] = scored ? blocks * ((c + regions - 1) / regions) : 0;
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

// A position in the step's work sequence: request by request, block of
// query rows by block, tile of regions by tile.
struct Cursor {
  int32_t request = -1;
  int32_t block = 0;
  int32_t tile = 0;

  // The tile at sequence position `index` (a binary search; used once).
  __device__ static Cursor at(const int32_t* prefix, const int32_t* cmax, int32_t R, int regions,
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
    const int32_t tiles = (cmax[lo] + regions - 1) / regions;
    const int32_t local = index - prefix[lo];
    return {lo, local / tiles, local % tiles};
  }

  // The next tile of the sequence (requests without work are skipped);
  // past the last request it stays there (request R).
  __device__ void advance(const int32_t* prefix, const int32_t* cmax, int32_t R, int regions) {
    if (request >= R) return;
    const int32_t tiles = (cmax[request] + regions - 1) / regions;
    if (++tile < tiles) return;
    tile = 0;
    if ((++block) * tiles < prefix[request + 1] - prefix[request]) return;
    block = 0;
    do {
      ++request;
    } while (request < R && prefix[request + 1] == prefix[request]);
  }
};

// The block-table entry of one region of tile `at` (producer thread `row`
// of the first `regions`), fetched into a register a tile before its copy
// is started (resolve, issue_tile): the load's latency then overlaps the
// producer's wait for a free stage.
struct PendingLookup {
  int32_t block = -1;     // block-table entry of the region (not yet checked)
  int32_t in_block = 0;   // region index inside the block
  int32_t request = -1;   // -1: past the request's scored range, nothing to read
  int32_t run = 0;        // rows of the copy this row starts (0: another row's copy holds it)
  bool in_table = false;  // the region's column is inside the block table
};

// Rows of one block are one contiguous run in the cache when regions are
// packed (region stride = row bytes), so a run of rows of one block inside
// a tile is one bulk copy, started by its first row; otherwise every row is
// its own copy.
__device__ __forceinline__ PendingLookup fetch_lookup(const IndexerParams& p, const int32_t* cmax,
                                                      const Cursor& at, int regions, bool packed,
                                                      int row) {
  PendingLookup l;
  if (row >= regions) return l;
  const int32_t j = at.tile * regions + row;
  const int regions_per_block = p.block_size / 8;
  const int32_t closed = cmax[at.request];
  if (j < closed) {
    // A shift when B / 8 is a power of two (the plan's block_shift), as
    // every engine's block sizes are; an integer division otherwise.
    const int32_t col = p.block_shift >= 0 ? j >> p.block_shift : j / regions_per_block;
    l.request = at.request;
    l.in_block = j - col * regions_per_block;
    l.in_table = column_ok(p.guard, col);
    if (l.in_table) {
      l.block = __ldg(p.block_table + int64_t{at.request} * p.block_table_stride + col);
    }
    if (!packed) {
      l.run = 1;
    } else if (row == 0 || l.in_block == 0) {
      l.run = min(min(regions_per_block - l.in_block, regions - row), closed - j);
    }
  }
  return l;
}

// One producer thread's row of a tile: where its copy starts in the cache
// and how many rows it copies.
struct TileRow {
  int64_t offset = -1;  // byte offset into the summary cache; -1: zero-fill the row
  int32_t run = 0;      // rows copied from `offset` (0: another row's copy holds it)
};

// Byte offset (into the summary cache) and run of the fetched region, -1
// past the request's scored range. A block id outside the table or the
// cache is a fault: the region reads as zeros (offset -1) and scores 0.
__device__ __forceinline__ TileRow resolve(const IndexerParams& p, const PendingLookup& l) {
  TileRow r;
  r.run = l.run;
  if (l.request >= 0) {
    if (l.in_table && block_ok(p.guard, l.block)) {
      r.offset =
          int64_t{l.block} * p.summary_block_stride + int64_t{l.in_block} * p.summary_region_stride;
    } else {
      report_fault(p.guard, DeviceFault::summary_block, l.request, l.block);
    }
  }
  return r;
}

// The summary pipeline's stages: the CTA's i-th tile lives in stage
// i % count. Each stage has two mbarriers whose phases flip at each use:
// `full` completes when the producer's copies of the tile have landed,
// `empty` when the consumer that read it is done with it. The count is the
// plan's (LayerSchedule), from the shared memory left next to the query
// operands; it is a run-time value, so stages are walked by StageCursor
// (no division per tile).
struct Stages {
  int32_t count;        // stages, >= 2
  uint32_t buffers;     // shared address of stage 0
  uint32_t tile_bytes;  // bytes of one stage
  uint32_t full;        // shared address of the stages' full mbarriers (u64 each)
  uint32_t empty;       // shared address of the stages' empty mbarriers (u64 each)

  __device__ uint32_t buffer(int stage) const {
    return buffers + static_cast<uint32_t>(stage) * tile_bytes;
  }
  __device__ uint32_t full_bar(int stage) const { return full + static_cast<uint32_t>(stage) * 8u; }
  __device__ uint32_t empty_bar(int stage) const {
    return empty + static_cast<uint32_t>(stage) * 8u;
  }
};

// Stage of a tile and the parity of the stage's use it is: use u of a
// stage waits for `full` phase u (parity u & 1), and before use u + 1 the
// producer waits for `empty` phase u.
struct StageCursor {
  int stage = 0;
  uint32_t phase = 0;

  __device__ void advance(int count) {
    if (++stage == count) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

// Producer thread `row`'s part of starting the copies of a tile into
// `stage` (rows of `row_bytes`, packed): the first row of each run copies
// the run with one bulk copy; a row past the request's scored range or in
// a faulty block (offset -1) is zero-filled with plain stores. Every
// producer thread arrives once on the stage's full barrier with the bytes
// it started, so the phase completes when the whole tile has landed (the
// arrival also releases the zero-fill stores to the consumer).
__device__ __forceinline__ void issue_tile(const IndexerParams& p, int row, const TileRow& r,
                                           int regions, int row_bytes, const Stages& pipe,
                                           int stage) {
  const uint32_t to = pipe.buffer(stage) + static_cast<uint32_t>(row * row_bytes);
  if (row < regions && r.offset < 0) {
    for (int c = 0; c < row_bytes; c += 16) {
      asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(to + c), "r"(0) : "memory");
    }
    bulk::fence_proxy_async();  // before a later tile's bulk copy rewrites these bytes
  }
  const uint32_t bytes = row < regions && r.offset >= 0
                             ? static_cast<uint32_t>(r.run) * static_cast<uint32_t>(row_bytes)
                             : 0u;
  const uint32_t bar = pipe.full_bar(stage);
  bulk::arrive_expect_tx(bar, bytes);
  if (bytes != 0) bulk::copy(to, static_cast<const char*>(p.summaries) + r.offset, bytes, bar);
}

// Stages block `at.block` of request `at.request`: its index queries as the
// B operand, weights, closed counts and output rows; resets row_max.
// Index queries go in as f16 when `try_f16` and every row scaled by a power
// of two converts exactly (its dots come out 2^shift too large; the
// epilogue multiplies by qscale = 2^-shift, exactly), else as bf16 with
// qscale 1. Returns whether f16 was used (the same for every thread).
// Run by one consumer warpgroup (thread `tid` of 128, named barrier
// `bar_id`) into its own block of shared memory at `base`.
template <int N>
__device__ bool stage_block(const IndexerParams& p, const IndexerSmem& L, unsigned char* base,
                            const RequestRows* requests, const Cursor& at, bool try_f16, int tid,
                            int bar_id) {
  constexpr int P = N / indexer_tc_heads();
  const RequestRows rr = requests[at.request];
  const int32_t row0 = rr.first + at.block * p.rows_per_unit;
  const int32_t rows = min(p.rows_per_unit, rr.first + rr.count - row0);
  const int G = p.num_groups;
  const int slots = rows * G;
  const int32_t first_pos = rr.last_pos - (rr.first + rr.count - 1 - row0);
  // Element offset of each slot's index-query row (head 0), -1 for padding
  // slots: the copy loop below then divides by G nowhere. The per-slot
  // tables are written by the thread that flush_row_max reads them with.
  int64_t* source = reinterpret_cast<int64_t*>(base + L.source);
  int* exponent = reinterpret_cast<int*>(base + L.exponent);
  int32_t* closed = reinterpret_cast<int32_t*>(base + L.closed);
  int64_t* out_row = reinterpret_cast<int64_t*>(base + L.out_row);
  uint32_t* row_max = reinterpret_cast<uint32_t*>(base + L.row_max);
  int32_t* max_index = reinterpret_cast<int32_t*>(base + L.max_index);
  for (int slot = tid; slot < P; slot += kThreads) {
    int32_t c = 0;
    int64_t local = 0;
    if (slot < slots) {
      const int32_t pos = first_pos + slot / G;
      c = min(max(pos, 0) / 8, p.columns);
      if (c <= p.skip_topk) c = 0;
      local = row0 + slot / G - p.row_begin;
    }
    source[slot] = slot < slots
                       ? (row0 + slot / G) * p.query_stride_t + (slot % G) * p.query_stride_g
                       : int64_t{-1};
    closed[slot] = c;
    out_row[slot] = local * p.scores_stride_t + (slot % G) * p.scores_stride_g;
    max_index[slot] = static_cast<int32_t>(local * G + slot % G);
    row_max[slot] = 0;
  }
  for (int n = tid; n < N; n += kThreads) exponent[n] = 0;
  // Weights load now, in flight with the index queries below.
  constexpr int kWeights = (indexer_tc_heads() * P + kThreads - 1) / kThreads;
  float w[kWeights];
#pragma unroll
  for (int k = 0; k < kWeights; ++k) {
    const int i = tid + k * kThreads, h = i / P, slot = i % P;
    w[k] = 0.0f;
    if (i < indexer_tc_heads() * P && h < p.index_heads && slot < slots) {
      w[k] = __ldg(p.index_weight + (row0 + slot / G) * p.weight_stride_t +
                   (slot % G) * p.weight_stride_g + h);
    }
  }
  warpgroup_sync(bar_id);
  // Thread i copies 16-byte chunk i % chunks of rows i / chunks + k * step:
  // chunks (Di / 8) is a power of two <= kThreads, so a thread's chunk, and
  // with it its permuted k positions, never changes.
  const int log2_chunks = __ffs(p.index_dim / 8) - 1;
  const int c = tid & ((1 << log2_chunks) - 1);
  const int n_first = tid >> log2_chunks;
  const int n_step = kThreads >> log2_chunks;
  auto load = [&](int n) {
    const int h = n / P;
    const int64_t src = source[n % P];
    if (h >= p.index_heads || src < 0) return make_uint4(0, 0, 0, 0);
    return *reinterpret_cast<const uint4*>(p.index_query + src + h * p.query_stride_h + c * 8);
  };
  auto word = [&](int n, int k) {
    return reinterpret_cast<uint32_t*>(base + L.query +
                                       query_offset(N, n, kappa_of(c * 8 + 2 * k)));
  };
  // One pass over global memory: the thread's rows are loaded kBatch at a
  // time, all loads issued before the first is used (one dependent round
  // trip per batch; ncu showed staging that re-read the rows, four round
  // trips at N = 32, at a quarter of the decode indexer's stall samples).
  // A row's lanes (a run of `chunks` lanes, or the whole warp) combine
  // their exponents. When a row lies inside one warp (Di <= 256) that is
  // its largest exponent, so the row is checked and stored as f16 right
  // away (ncu: a second pass over shared memory, branchy, was most of the
  // staging time); wider rows store bf16 and gather exponents with shared
  // atomics for the passes after the barrier.
  constexpr int kBatch = 8;
  const int lanes = min(1 << log2_chunks, 32);
  const bool in_warp = (1 << log2_chunks) <= 32;
  const bool direct = try_f16 && in_warp;
  bool exact = true;
  auto stage_rows = [&](bool as_f16) {
    for (int n0 = n_first; n0 < N; n0 += kBatch * n_step) {
      uint4 v[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int n = n0 + b * n_step;
        v[b] = n < N ? load(n) : make_uint4(0, 0, 0, 0);
      }
      // Each row's largest exponent across its lanes, the kBatch rows'
      // shuffles side by side (row by row, each a chain of dependent
      // shuffles behind its own branch, a decode block's staging took 5.4
      // instead of 4.4 us on the H200 at N = 32, Di = 256). Every lane runs
      // every b (rows past N with zeros; N is a multiple of n_step, so that
      // is the same b for a whole warp): the shuffles stay converged.
      int row_e[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        row_e[b] = try_f16 ? max(max(max_exponent(v[b].x), max_exponent(v[b].y)),
                                 max(max_exponent(v[b].z), max_exponent(v[b].w)))
                           : 0;
      }
      if (try_f16) {
        for (int o = 1; o < lanes; o <<= 1) {
#pragma unroll
          for (int b = 0; b < kBatch; ++b) {
            row_e[b] = max(row_e[b], __shfl_xor_sync(0xffffffffu, row_e[b], o));
          }
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int n = n0 + b * n_step;
        const uint32_t words[4] = {v[b].x, v[b].y, v[b].z, v[b].w};
        const int e = row_e[b];
        if (n >= N) continue;
        const bool leader = (tid & (lanes - 1)) == 0;
        if (as_f16) {
          const int shift = row_shift(e);
          const float scale = pow2f(min(shift, 100));
          bool ok = shift <= 100;
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            ok = ok & f16_exact(words[k] & 0xffffu, e) & f16_exact(words[k] >> 16, e);
            *word(n, k) = scaled_f16x2(words[k], scale);
          }
          exact = exact & ok;
          if (leader) exponent[n] = e;
        } else {
#pragma unroll
          for (int k = 0; k < 4; ++k) *word(n, k) = words[k];
          if (try_f16 && leader && e > 0) atomicMax(exponent + n, e);
        }
      }
    }
  };
  stage_rows(direct);
  float* weight = reinterpret_cast<float*>(base + L.weight);
#pragma unroll
  for (int k = 0; k < kWeights; ++k) {
    const int i = tid + k * kThreads;
    if (i < indexer_tc_heads() * P) weight[i] = w[k];
  }
  // f16 when every row, scaled by its power of two, converts exactly.
  bool use_f16 = false;
  if (direct) {
    use_f16 = warpgroup_sync_and(bar_id, exact);
    if (!use_f16) {
      // Rare (a row spanning more than 32 binades): the rows again, as bf16.
      try_f16 = false;
      stage_rows(false);
    }
  } else if (try_f16) {
    // Rows wider than a warp: check and convert the thread's own words
    // after every exponent is in.
    warpgroup_sync(bar_id);
    for (int n = n_first; n < N; n += n_step) {
      const int row_max = exponent[n];
      exact = exact & (row_shift(row_max) <= 100);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t two = *word(n, k);
        exact = exact & f16_exact(two & 0xffffu, row_max) & f16_exact(two >> 16, row_max);
      }
    }
    use_f16 = warpgroup_sync_and(bar_id, exact);
    if (use_f16) {
      for (int n = n_first; n < N; n += n_step) {
        const float scale = pow2f(row_shift(exponent[n]));
#pragma unroll
        for (int k = 0; k < 4; ++k) *word(n, k) = scaled_f16x2(*word(n, k), scale);
      }
    }
  }
  float* qscale = reinterpret_cast<float*>(base + L.qscale);
  for (int i = tid; i < indexer_tc_heads() * P; i += kThreads) {
    qscale[i] = use_f16 ? pow2f(-row_shift(exponent[i])) : 1.0f;
  }
  wgmma::fence_proxy_async_smem();
  warpgroup_sync(bar_id);
  return use_f16;
}

// Adds the block's best keys to the global row maxima (consumer thread
// `tid`; its warpgroup synchronized after gather_row_max).
template <int N>
__device__ void flush_row_max(const IndexerParams& p, const IndexerSmem& L,
                              const unsigned char* base, int tid) {
  constexpr int P = N / indexer_tc_heads();
  if (p.row_max == nullptr) return;
  const int32_t* closed = reinterpret_cast<const int32_t*>(base + L.closed);
  const int32_t* max_index = reinterpret_cast<const int32_t*>(base + L.max_index);
  const uint32_t* row_max = reinterpret_cast<const uint32_t*>(base + L.row_max);
  for (int slot = tid; slot < P; slot += kThreads) {
    if (closed[slot] != 0) atomicMax(p.row_max + max_index[slot], row_max[slot]);
  }
}

}  // namespace step5::cuda::tc
