// Page source of the tile attention kernel: which regions (8-key pages) the
// tile's rows attend, one window of window_regions() regions at a time, as
// an ordered list of (region, row mask, cache block) in shared memory.
//   CSA: row j attends its selected regions in [0, c_j) (c_j its own region,
//        -1 and out-of-range entries dropped as in the row kernel) and its
//        own region c_j up to its position;
//   SWA: row j attends positions max(0, p_j - W + 1) .. p_j.
// A key is attended by row j when bit j of its region's mask is set and
// row_low[j] <= key position <= row_position[j]; the mainloop applies both.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention/heuristics.h"
#include "cuda/common/guard.h"
#include "cuda/common/rows.h"
#include "cuda/tile_attention/geometry.h"
#include "cuda/tile_attention/params.h"

namespace step5::cuda::tiled {

// The tile's rows: positions and lowest attended key, in shared memory, and
// the bits of the rows that attend anything (live rows whose position the
// block table holds; the others come out NaN, and are reported by one of
// the tile's G work items: the group-0 one, its group `item_group` in a
// persistent grid, else CTA blockIdx.x's). The two give the same group for
// one CTA per item; passing the item's group there too changed the code
// of every tile kernel (D = 192 cubins, thirty-first session), so the
// one-CTA kernels keep the form they were measured with.
template <class Smem>
__device__ uint32_t load_tile_rows(const PagedAttentionParams& p, int64_t first, int count,
                                   Smem& sm, int32_t& request, int item_group = -1) {
  const int j = static_cast<int>(threadIdx.x);
  if (j < tile_rows()) {
    int32_t r = 0, pos = -1;
    bool ok = false;
    if (j < count && row_of(p.rows, first + j, r, pos)) {
      ok = pos >= 0 && column_ok(p.guard, pos / p.block_size);
      if (!ok && (item_group < 0 ? blockIdx.x % p.num_kv_heads == 0 : item_group == 0)) {
        report_fault(p.guard, pos < 0 ? DeviceFault::bad_position : DeviceFault::past_block_table,
                     first + j, pos);
      }
    }
    sm.row_position[j] = ok ? pos : -1;
    sm.row_low[j] = ok && p.window > 0 ? max(0, pos - p.window + 1) : 0;
    if (j == 0) {
      sm.faulted = 0;
      sm.request = r;  // every row of a tile is of one request
    }
  }
  __syncthreads();
  request = sm.request;
  uint32_t live = 0;
#pragma unroll
  for (int i = 0; i < tile_rows(); ++i) live |= (sm.row_position[i] >= 0 ? 1u : 0u) << i;
  return live;
}

// What a tile attention CTA starts from: its tile (of tp.tiles), KV group
// and rows (load_tile_rows), read by all its threads.
struct TileStart {
  int g;            // KV group
  int64_t first;    // first step row of the tile
  int count;        // rows of the tile (1..16)
  int32_t request;  // their request
  uint32_t live;    // rows that attend anything
  uint32_t wanted;  // rows of the tile (count <= tile_rows() = 16)
};

// Work item `work` (tile work / G, group work % G; one CTA's blockIdx.x
// unless the grid is persistent), its rows not read yet (request and live 0).
__device__ __forceinline__ TileStart tile_of(const TileAttentionParams& tp, int work) {
  const PagedAttentionParams& p = tp.attn;
  TileStart t;
  const int tile = work / p.num_kv_heads;
  t.g = work % p.num_kv_heads;
  t.first = __ldg(tp.tiles + 2 * tile);
  t.count = __ldg(tp.tiles + 2 * tile + 1);
  t.request = 0;
  t.live = 0;
  t.wanted = (1u << t.count) - 1u;
  return t;
}

// Reads the tile's rows (load_tile_rows: shared memory and a barrier) and
// sets t.live and t.request; for CTA blockIdx.x's item.
template <class Smem>
__device__ __forceinline__ void read_tile_rows(const PagedAttentionParams& p, TileStart& t,
                                               Smem& sm) {
  t.live = load_tile_rows(p, t.first, t.count, sm, t.request);
}
// The same for an item of a persistent grid.
template <class Smem>
__device__ __forceinline__ void read_item_rows(const PagedAttentionParams& p, TileStart& t,
                                               Smem& sm) {
  t.live = load_tile_rows(p, t.first, t.count, sm, t.request, t.g);
}

template <class Smem>
__device__ __forceinline__ TileStart start_tile(const TileAttentionParams& tp, Smem& sm) {
  TileStart t = tile_of(tp, static_cast<int>(blockIdx.x));
  read_tile_rows(tp.attn, t, sm);
  return t;
}

// Regions of the window that starts at `base` when the last attended region
// is `last`, rounded up to whole passes of the CTA's threads (the
// compaction's ballots need every lane).
__device__ __forceinline__ int window_span(int32_t base, int32_t last) {
  const int threads = static_cast<int>(blockDim.x);
  const int span = min(window_regions(), last - base + 1);
  return (span + threads - 1) / threads * threads;
}

// Row masks of regions [base, base + span) into sm.row_mask.
template <class Smem>
__device__ void build_window(const PagedAttentionParams& p, int64_t first, uint32_t live,
                             int32_t base, int span, Smem& sm) {
  const int threads = static_cast<int>(blockDim.x);
  const int tid = static_cast<int>(threadIdx.x);
  if (p.selected == nullptr) {
    // SWA: every row whose window meets the region.
    for (int i = tid; i < span; i += threads) {
      const int32_t key0 = (base + i) * attn::page_tokens();
      uint32_t m = 0;
#pragma unroll
      for (int j = 0; j < tile_rows(); ++j) {
        const bool in = ((live >> j) & 1u) != 0 && key0 <= sm.row_position[j] &&
                        key0 + attn::page_tokens() - 1 >= sm.row_low[j];
        m |= (in ? 1u : 0u) << j;
      }
      sm.row_mask[i] = m;
    }
    __syncthreads();
    return;
  }
  for (int i = tid; i < span; i += threads) sm.row_mask[i] = 0;
  __syncthreads();
  // CSA: the selections of the live rows (selection row = step row -
  // row_begin), entry e = j * topk + k read by thread e % threads. Loads go
  // out kBatch at a time before their atomics (one dependent load per
  // entry stalled this phase), and (j, k) step without dividing.
  constexpr int kBatch = 8;
  const int g = static_cast<int>(blockIdx.x % p.num_kv_heads);
  const int32_t entries = tile_rows() * p.topk;
  const int step_j = threads / p.topk, step_k = threads % p.topk;
  int j = tid / p.topk, k = tid % p.topk;
  for (int32_t e0 = tid; e0 < entries; e0 += kBatch * threads) {
    int32_t v[kBatch];
    int row[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      row[u] = j;
      const bool load = e0 + u * threads < entries && ((live >> j) & 1u) != 0;
      v[u] = load ? __ldg(p.selected + (first + j - p.row_begin) * p.selected_row_stride +
                          int64_t{g} * p.selected_group_stride + k)
                  : -1;
      k += step_k;
      j += step_j;
      if (k >= p.topk) {
        k -= p.topk;
        ++j;
      }
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (v[u] < 0) continue;
      const int32_t cur = sm.row_position[row[u]] / attn::page_tokens();
      if (v[u] < cur && v[u] >= base && v[u] - base < span) {
        atomicOr(&sm.row_mask[v[u] - base], 1u << row[u]);
      }
    }
  }
  if (tid < tile_rows() && ((live >> tid) & 1u) != 0) {
    const int32_t cur = sm.row_position[tid] / attn::page_tokens();
    if (cur >= base && cur - base < span) atomicOr(&sm.row_mask[cur - base], 1u << tid);
  }
  __syncthreads();
}

// Compacts the window's attended regions (up to region `last`) into the
// ordered list with their cache blocks; returns its length. A block outside
// the cache is reported once and faults the rows that attend it.
template <class Smem>
__device__ int32_t compact_window(const PagedAttentionParams& p, int64_t first, int32_t request,
                                  int32_t base, int32_t last, int span, Smem& sm) {
  const int threads = static_cast<int>(blockDim.x);
  const int warps = threads / 32;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  const int32_t* bt = p.block_table + int64_t{request} * p.block_table_stride;
  const int32_t pages_per_block = p.block_size / attn::page_tokens();
  int32_t length = 0;
  for (int i0 = 0; i0 < span; i0 += threads) {
    const int i = i0 + tid;
    const uint32_t m = base + i <= last ? sm.row_mask[i] : 0u;
    const unsigned bits = __ballot_sync(0xffffffffu, m != 0);
    if (lane == 0) sm.warp_count[warp] = __popc(bits);
    __syncthreads();
    int32_t offset = length, total = 0;
    for (int w = 0; w < warps; ++w) {
      if (w < warp) offset += sm.warp_count[w];
      total += sm.warp_count[w];
    }
    if (m != 0) {
      const int32_t k = offset + __popc(bits & ((1u << lane) - 1u));
      const int32_t region = base + i;
      // Loaded here, after the pass's barrier: issued before it, the
      // Hopper fp8 CSA layer ran ~6 % slower (H100, 2048-row chunk at 8K;
      // benchmarks.md, twenty-second session).
      int32_t block = __ldg(bt + region / pages_per_block);
      if (!block_ok(p.guard, block)) {
        report_fault(p.guard, DeviceFault::kv_block, first + __ffs(m) - 1, block);
        atomicOr(&sm.faulted, m);
        block = -1;
      }
      sm.list_region[k] = region;
      sm.list_mask[k] = m;
      sm.list_block[k] = block;
    }
    length += total;
    __syncthreads();
  }
  return length;
}

// The tile's attended keys [key_lo, key_hi] and the regions that hold
// them (none when no row is live: region_lo > region_hi).
struct TileKeys {
  int32_t key_lo;
  int32_t key_hi;
  int32_t region_lo;
  int32_t region_hi;
};

template <class Smem>
__device__ __forceinline__ TileKeys tile_keys(uint32_t live, const Smem& sm) {
  TileKeys k{INT32_MAX, -1, 0, -1};
  for (int j = 0; j < tile_rows(); ++j) {
    if (((live >> j) & 1u) == 0) continue;
    k.key_lo = min(k.key_lo, sm.row_low[j]);
    k.key_hi = max(k.key_hi, sm.row_position[j]);
  }
  if (live != 0) {
    k.region_lo = k.key_lo / attn::page_tokens();
    k.region_hi = k.key_hi / attn::page_tokens();
  }
  return k;
}

// Builds and compacts the list of the window that starts at region `base`;
// returns its length. `between(span)` runs after the row masks' barrier and
// before the compaction, so that flags it adds to the masks travel into the
// list (the Hopper kernel's cut marks, hopper_csa_list.cuh).
template <class Smem, class Between>
__device__ __forceinline__ int32_t build_window_list(const PagedAttentionParams& p, int64_t first,
                                                     uint32_t live, int32_t request,
                                                     const TileKeys& keys, int32_t base, Smem& sm,
                                                     Between&& between) {
  const int span = window_span(base, keys.region_hi);
  build_window(p, first, live, base, span, sm);
  between(span);
  return compact_window(p, first, request, base, keys.region_hi, span, sm);
}
template <class Smem>
__device__ __forceinline__ int32_t build_window_list(const PagedAttentionParams& p, int64_t first,
                                                     uint32_t live, int32_t request,
                                                     const TileKeys& keys, int32_t base, Smem& sm) {
  return build_window_list(p, first, live, request, keys, base, sm, [](int) {});
}

// Runs the tile's key set window by window: for each window of
// window_regions() regions between the lowest and highest attended ones,
// calls run(length, key_lo, key_hi) on its compacted list. Keys no row
// attends are never read: below the lowest window (0 for CSA rows), above
// the last row; so are regions outside that range.
template <class Smem, class Run>
__device__ __forceinline__ void for_each_window(const PagedAttentionParams& p, int64_t first,
                                                uint32_t live, int32_t request, Smem& sm,
                                                Run&& run) {
  const TileKeys keys = tile_keys(live, sm);
#pragma unroll 1
  for (int32_t base = keys.region_lo; base <= keys.region_hi; base += window_regions()) {
    const int32_t length = build_window_list(p, first, live, request, keys, base, sm);
    run(length, keys.key_lo, keys.key_hi);
  }
}

}  // namespace step5::cuda::tiled
