// The per-tile choice (tile_choice.h): one CTA per planned tile counts the
// distinct regions its rows selected, in shared-memory bitmaps of as many
// groups at once as fit, then writes the tile's decision and its rows'
// entries of the row kernel's list; every CTA also copies a share of the
// chunk's untiled rows into that list.
#include "cuda/tile_attention/tile_choice.h"

#include <algorithm>

#include "core/check.h"
#include "core/plan.h"
#include "cuda/common/check.h"
#include "cuda/tile_attention/geometry.h"
#include "cuda/tile_attention/heuristics.h"

namespace step5::cuda {
namespace {

// A tile's CTA is latency-bound (a few CTAs per chunk, a 128K chunk of 512
// rows has 32 tiles): 1,024 threads, groups counted together and 16-byte
// loads keep its serial steps few (51 us per 128K chunk at 256 threads, a
// group at a time and 4-byte loads, on an H100).
constexpr int kThreads = 1024;
constexpr int kBitmapWords = tiled::tile_choice_max_regions() / 32;
static_assert(kBitmapWords * 4 + kThreads / 32 * 4 <= 48 * 1024,
              "the bitmaps are static shared memory");
// 16-byte loads in flight per thread before their bits are set.
constexpr int kLoadsInFlight = 4;

__device__ __forceinline__ void mark(uint32_t* bitmap, int32_t region, int32_t regions) {
  if (region >= 0 && region < regions) atomicOr(&bitmap[region >> 5], 1u << (region & 31));
}

// Sets, in bitmap j * words, the regions group g0 + j of the tile's `count`
// rows selected, for j < groups: 16-byte loads when every row and group
// starts on 16 bytes, else 4-byte ones.
__device__ __forceinline__ void mark_groups(const TileChoiceParams& p, const int32_t* rows,
                                            int count, int g0, int groups, int words,
                                            uint32_t* bitmap) {
  const int tid = static_cast<int>(threadIdx.x);
  const bool vector = p.topk % 4 == 0 && p.selected_row_stride % 4 == 0 &&
                      p.selected_group_stride % 4 == 0 &&
                      reinterpret_cast<uintptr_t>(p.selected) % 16 == 0;
  const int per_row = vector ? p.topk / 4 : p.topk;
  const int per_group = count * per_row;
  const int n = groups * per_group;
  for (int base = tid; base < n; base += kThreads * kLoadsInFlight) {
    int4 v[kLoadsInFlight];
    uint32_t* where[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int i = base + u * kThreads;
      v[u] = make_int4(-1, -1, -1, -1);
      where[u] = bitmap;
      if (i < n) {
        const int j = i / per_group, rest = i - j * per_group;
        const int r = rest / per_row, k = rest - r * per_row;
        const int32_t* const at =
            rows + (g0 + j) * p.selected_group_stride + r * p.selected_row_stride;
        if (vector) {
          v[u] = __ldg(reinterpret_cast<const int4*>(at) + k);
        } else {
          v[u].x = __ldg(at + k);
        }
        where[u] = bitmap + j * words;
      }
    }
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      mark(where[u], v[u].x, p.bitmap_regions);
      mark(where[u], v[u].y, p.bitmap_regions);
      mark(where[u], v[u].z, p.bitmap_regions);
      mark(where[u], v[u].w, p.bitmap_regions);
    }
  }
}

__global__ void __launch_bounds__(kThreads) tile_choice_kernel(const TileChoiceParams p) {
  __shared__ uint32_t bitmap[kBitmapWords];
  __shared__ int warp_sums[kThreads / 32];
  const int tid = static_cast<int>(threadIdx.x);
  // The untiled rows are the row kernel's rows in every case.
  for (int64_t i = int64_t{blockIdx.x} * kThreads + tid; i < p.num_untiled;
       i += int64_t{gridDim.x} * kThreads) {
    const int32_t t = __ldg(p.untiled + i);
    p.row_list[t - p.row_begin] = t;
  }
  const int tile = static_cast<int>(blockIdx.x);
  if (tile >= p.num_tiles) return;
  const int32_t first = __ldg(p.tiles + 2 * tile);
  const int32_t count = __ldg(p.tiles + 2 * tile + 1);
  const int words = p.bitmap_regions / 32;
  const int32_t* const rows = p.selected + (first - p.row_begin) * p.selected_row_stride;
  // Each thread's share of the distinct regions, summed over the groups.
  const int groups_at_once = min(p.num_groups, kBitmapWords / words);
  int mine = 0;
  for (int g0 = 0; g0 < p.num_groups; g0 += groups_at_once) {
    const int groups = min(groups_at_once, p.num_groups - g0);
    for (int w = tid; w < groups * words; w += kThreads) bitmap[w] = 0u;
    __syncthreads();
    mark_groups(p, rows, count, g0, groups, words, bitmap);
    __syncthreads();
    for (int w = tid; w < groups * words; w += kThreads) mine += __popc(bitmap[w]);
    __syncthreads();  // counted before the next groups clear the bitmaps
  }
  for (int offset = 16; offset > 0; offset /= 2) mine += __shfl_xor_sync(0xffffffffu, mine, offset);
  if (tid % 32 == 0) warp_sums[tid / 32] = mine;
  __syncthreads();
  int total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
  // A tile costs its union whatever its row count (tile_rows() rows of MMA);
  // its rows on the row kernel cost K regions each.
  const float tile_cost = static_cast<float>(tiled::tile_rows()) * static_cast<float>(total);
  const float rows_cost = p.crossover * static_cast<float>(count) * static_cast<float>(p.topk) *
                          static_cast<float>(p.num_groups);
  const bool runs = tile_cost <= rows_cost;
  if (tid == 0) p.tile_runs[tile] = runs ? 1 : 0;
  if (tid < count) p.row_list[first + tid - p.row_begin] = runs ? -1 : first + tid;
}

}  // namespace

size_t tile_choice_list_offset(int64_t rows) {
  const size_t n = static_cast<size_t>(rows > 0 ? rows : 0);
  return detail::align_up(n * sizeof(int32_t), detail::kWorkspaceAlign);
}

size_t tile_choice_bytes(int64_t rows) {
  return 2 * tile_choice_list_offset(rows);
}

void launch_tile_choice(const TileChoiceParams& p, cudaStream_t stream) {
  const ErrorCode bad = ErrorCode::invalid_argument;
  detail::require(p.selected != nullptr && p.tile_runs != nullptr && p.row_list != nullptr &&
                      (p.num_tiles == 0 || p.tiles != nullptr) &&
                      (p.num_untiled == 0 || p.untiled != nullptr),
                  bad,
                  "tile choice: selected, tile_runs, row_list, and the tile and untiled "
                  "tables (when not empty) expected non-null");
  detail::require(
      p.num_groups > 0 && p.topk > 0 && p.num_rows > 0 && p.row_begin >= 0, bad,
      "tile choice: expected G > 0, K > 0, rows > 0 and row_begin >= 0, got G = ", p.num_groups,
      ", K = ", p.topk, ", rows = ", p.num_rows, ", row_begin = ", p.row_begin);
  detail::require(p.bitmap_regions > 0 && p.bitmap_regions % 32 == 0 &&
                      p.bitmap_regions <= tiled::tile_choice_max_regions(),
                  bad, "tile choice: bitmap regions expected a multiple of 32 in 32..",
                  tiled::tile_choice_max_regions(), ", got ", p.bitmap_regions);
  detail::require(p.crossover > 0.0f, bad, "tile choice: crossover expected > 0, got ",
                  p.crossover);
  detail::require(
      p.num_tiles >= 0 && p.num_untiled >= 0 && p.num_untiled + int64_t{p.num_tiles} <= p.num_rows,
      bad, "tile choice: tiles and untiled rows expected within the chunk's ", p.num_rows,
      " rows, got ", p.num_tiles, " tiles and ", p.num_untiled, " untiled rows");
  const int64_t untiled_ctas = (p.num_untiled + kThreads - 1) / kThreads;
  const int64_t ctas = std::max<int64_t>({int64_t{p.num_tiles}, untiled_ctas, 1});
  tile_choice_kernel<<<static_cast<unsigned>(ctas), kThreads, 0, stream>>>(p);
  check_launch("tile_choice_kernel");
}

}  // namespace step5::cuda
