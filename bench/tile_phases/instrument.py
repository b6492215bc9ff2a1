#!/usr/bin/env python3
"""Adds per-item phase marks to the Hopper tile attention kernels, in place.

A profiling aid, not part of any build: it edits src/cuda/tile_attention/
so that thread 0 of every CTA records clock64() at the kernels' phase
boundaries of each work item (tile, KV group): one per CTA for CSA, one
per turn of the persistent SWA kernel's loop. A one-thread kernel launched
after each tile launch prints them (every 8th launch from the 7th, up to
the 100th, one "PH ..." line per item). Build step5attn, run `step5attn bench --no-check
--filter ...` on the device, then feed its output to analyze.py. Undo
with `git checkout src/cuda/tile_attention && rm
src/cuda/tile_attention/ph.cuh`.

The marks change the kernels' code a little (the fp8 kernel runs at the
register limit; check `-Xptxas -v` for spills before trusting its
mainloop figure). Each anchor below must match the source exactly; if one
does not, the script writes nothing and names it.
"""
import os
import sys

# The source tree to edit: this checkout, or the one named by --root DIR
# (the tile_phases test instruments a copy).
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..')
if len(sys.argv) == 3 and sys.argv[1] == '--root':
    ROOT = sys.argv[2]
elif len(sys.argv) != 1:
    sys.exit('usage: instrument.py [--root DIR]')
TILE = os.path.join(ROOT, 'src', 'cuda', 'tile_attention')


# Edits are made in memory and written only once every anchor matched, so
# a failed run leaves the sources as they were.
edited = {}


def sub(name, old, new):
    if name not in edited:
        edited[name] = open(os.path.join(TILE, name)).read()
    if old not in edited[name]:
        sys.exit(f'instrument.py: anchor not found in {name} (nothing written):\n{old}')
    edited[name] = edited[name].replace(old, new, 1)


# Marks: 0 start, 1 tile rows read, 10 Q copies issued (SWA: before the
# rows are read, so before mark 1), 11 row masks built, 12 list compacted
# (SWA builds its list in one pass: both at its end), 2 list prepared, 6
# (fp8) Q landed, 3 first stage landed, 4 mainloop done, 5 output stored.
# Slot 7/8 hold the item's global start/end time, 9 its SM, row count and
# kind. The persistent SWA kernel prepares item n + 1 (marks 0, 10, 1, 11,
# 12, 2) between item n's marks 4 and 5, so its "to first stage" holds the
# epilogue of the item before, and its "epilogue" the next item's
# preparation.
edited['ph.cuh'] = ("""#pragma once
#include <cstdint>
namespace step5::cuda::tiled {
static __device__ long long g_ph[16][65536];
static __device__ int g_ph_item[65536];  // the item CTA b marks now (thread 0's)
static __device__ unsigned long long g_ph_launch;
__device__ __forceinline__ void ph_set_item(int item) {
  if (threadIdx.x == 0 && blockIdx.x < 65536) g_ph_item[blockIdx.x] = item < 65536 ? item : -1;
}
__device__ __forceinline__ int ph_item() {
  return blockIdx.x < 65536 ? g_ph_item[blockIdx.x] : -1;
}
__device__ __forceinline__ void ph_mark(int k) {
  if (threadIdx.x == 0 && ph_item() >= 0) g_ph[k][ph_item()] = clock64();
}
__device__ __forceinline__ long long ph_globaltimer() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void ph_start(int item) {
  ph_set_item(item);
  ph_mark(0);
  if (threadIdx.x == 0 && ph_item() >= 0) {
    g_ph[3][ph_item()] = 0;
    g_ph[7][ph_item()] = ph_globaltimer();
  }
}
__device__ __forceinline__ void ph_end(int item, int count, bool fp8, bool swa) {
  ph_set_item(item);
  ph_mark(5);
  if (threadIdx.x == 0 && ph_item() >= 0) {
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    g_ph[8][ph_item()] = ph_globaltimer();
    g_ph[9][ph_item()] = smid | (int64_t{count} << 16) | (fp8 ? (1ll << 32) : 0) |
                         (swa ? (1ll << 33) : 0);
  }
}
static __global__ void ph_dump(int n) {
  const unsigned long long launch = g_ph_launch++;
  if (launch % 8 != 6 || launch > 100) return;
  printf("PHCALL %llu %d\\n", launch, n);
  for (int b = 0; b < n && b < 65536; ++b) {
    const long long c0 = g_ph[0][b];
    printf("PH %lld %lld %d %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld\\n",
           g_ph[9][b] >> 32, g_ph[9][b] & 0xffff, b, (g_ph[9][b] >> 16) & 0xffff, g_ph[7][b],
           g_ph[8][b], g_ph[1][b] - c0, g_ph[2][b] - c0, g_ph[3][b] - c0, g_ph[6][b] - c0,
           g_ph[4][b] - c0, g_ph[5][b] - c0, g_ph[10][b] - c0, g_ph[11][b] - c0, g_ph[12][b] - c0);
  }
}
}  // namespace step5::cuda::tiled
""")
include = '#include "cuda/tile_attention/params.h"'
sub('hopper_csa_list.cuh', include, include + '\n#include "cuda/tile_attention/ph.cuh"')
sub('hopper_mainloop.cuh', include, include + '\n#include "cuda/tile_attention/ph.cuh"')

# CSA: one item per CTA.
sub('hopper_csa_kernel.cuh', """  TileStart t = tile_of(tp, static_cast<int>(blockIdx.x));""",
    """  ph_start(static_cast<int>(blockIdx.x));
  TileStart t = tile_of(tp, static_cast<int>(blockIdx.x));""")
sub('hopper_csa_kernel.cuh', """  read_tile_rows(p, t, sm);""", """  read_tile_rows(p, t, sm);
  ph_mark(1);""")
sub('hopper_csa_kernel.cuh', """  hopper_stage_q<D>(p, first, count, g, sm);
  // (Written out""", """  hopper_stage_q<D>(p, first, count, g, sm);
  ph_mark(10);
  // (Written out""")
sub('hopper_csa_kernel.cuh', """    hopper_run_in_q_format<D>(sm, lane, w, run);""", """    ph_mark(2);
    hopper_run_in_q_format<D>(sm, lane, w, run);""")
# fp8 (both kernels): mark 6 once Q has landed.
sub('hopper_tile_io.cuh', include, include + '\n#include "cuda/tile_attention/ph.cuh"')
sub('hopper_tile_io.cuh', """  attn::cp_async_wait<0>();
  __syncthreads();
  if (hopper_q_to_f16<D>(sm)) {""", """  attn::cp_async_wait<0>();
  __syncthreads();
  ph_mark(6);
  if (hopper_q_to_f16<D>(sm)) {""")
sub('hopper_csa_kernel.cuh', """      hopper_run_window<D, kFp8, false, true>(""", """      ph_mark(2);
      hopper_run_window<D, kFp8, false, true>(""")
sub('hopper_csa_kernel.cuh', """  __syncthreads();  // sm.faulted complete; stage buffers free""",
    """  __syncthreads();  // sm.faulted complete; stage buffers free
  ph_mark(4);""")
sub('hopper_csa_kernel.cuh', """  hopper_store_tile<D, Smem>(p, first, count, g, kFp8 ? p.v_scale : 1.0f, bad, gate, w, sm.buffer);""",
    """  hopper_store_tile<D, Smem>(p, first, count, g, kFp8 ? p.v_scale : 1.0f, bad, gate, w, sm.buffer);
  __syncthreads();
  ph_end(static_cast<int>(blockIdx.x), count, kFp8, false);""")

# SWA: one item per turn of the persistent loop.
sub('hopper_window_kernel.cuh', """  WindowTile x;
  x.t = tile_of(tp, work);""", """  ph_start(work);
  WindowTile x;
  x.t = tile_of(tp, work);""")
sub('hopper_window_kernel.cuh', """  hopper_stage_q<D>(p, x.t.first, x.t.count, x.t.g, sm);
  read_item_rows(p, x.t, sm);""", """  hopper_stage_q<D>(p, x.t.first, x.t.count, x.t.g, sm);
  ph_mark(10);
  read_item_rows(p, x.t, sm);
  ph_mark(1);""")
sub('hopper_window_kernel.cuh', """  return x;
}""", """  ph_mark(2);
  return x;
}""")
sub('hopper_window_kernel.cuh', """    HopperState<D> w;
    hopper_init_state""", """    ph_set_item(work);
    HopperState<D> w;
    hopper_init_state""")
sub('hopper_window_kernel.cuh', """    __syncthreads();  // stage buffers, Q, rows and lists free""",
    """    __syncthreads();  // stage buffers, Q, rows and lists free
    ph_mark(4);""")
sub('hopper_window_kernel.cuh', """                         sm.buffer + Smem::kOutTailOffset);""",
    """                         sm.buffer + Smem::kOutTailOffset);
    __syncthreads();
    ph_end(work, t.count, kFp8, true);""")
sub('hopper_mainloop.cuh', """    wgmma::fence_proxy_async_smem();
    __syncthreads();
    const int32_t ahead = i + S - 2;""", """    wgmma::fence_proxy_async_smem();
    __syncthreads();
    if (i == 0 && threadIdx.x == 0 && ph_item() >= 0 && g_ph[3][ph_item()] == 0) {
      g_ph[3][ph_item()] = clock64();
    }
    const int32_t ahead = i + S - 2;""")
# CSA: mark 11 after the masks and cut marks (before the compaction), 12
# after the compaction.
sub('hopper_csa_list.cuh', """    mark_cut_regions(live, base, span, sm);
  });""", """    mark_cut_regions(live, base, span, sm);
    ph_mark(11);
  });
  ph_mark(12);""")
# SWA builds its list in one pass: marks 11 and 12 both at its end.
sub('hopper_window_list.cuh', """    slots[e] = (region % pages_per_block) * kPage;
  }
  __syncthreads();
  return length;""", """    slots[e] = (region % pages_per_block) * kPage;
  }
  __syncthreads();
  ph_mark(11);
  ph_mark(12);
  return length;""")
for kernel in ('hopper_csa_tiles_kernel', 'hopper_window_tiles_kernel'):
    sub('instance.cuh', f"""    check_launch("{kernel}");""", f"""    check_launch("{kernel}");
    ph_dump<<<1, 1, 0, stream>>>(static_cast<int>(items));""")
for name, text in edited.items():
    with open(os.path.join(TILE, name), 'w') as f:
        f.write(text)
print('instrumented src/cuda/tile_attention (undo: git checkout src/cuda/tile_attention '
      '&& rm src/cuda/tile_attention/ph.cuh)')
