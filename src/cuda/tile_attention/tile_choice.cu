// The per-tile choice (tile_choice.h): one CTA per planned tile counts,
// group by group, the distinct regions its rows selected in a shared-memory
// bitmap, then writes the tile's decision and its rows' entries of the row
// kernel's list; every CTA also copies a share of the chunk's untiled rows
// into that list.
#include "cuda/tile_attention/tile_choice.h"

#include <algorithm>

#include "core/check.h"
#include "core/plan.h"
#include "cuda/common/check.h"
#include "cuda/tile_attention/geometry.h"
#include "cuda/tile_attention/heuristics.h"

namespace step5::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kBitmapWords = tiled::tile_choice_max_regions() / 32;
static_assert(kBitmapWords * 4 + 64 <= 48 * 1024, "the bitmap is static shared memory");

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
  const int entries = count * p.topk;
  const int32_t* const rows = p.selected + (first - p.row_begin) * p.selected_row_stride;
  // Each thread's share of the distinct regions, summed over the groups.
  int mine = 0;
  for (int g = 0; g < p.num_groups; ++g) {
    for (int w = tid; w < words; w += kThreads) bitmap[w] = 0u;
    __syncthreads();
    const int32_t* const group = rows + g * p.selected_group_stride;
    for (int i = tid; i < entries; i += kThreads) {
      const int r = i / p.topk, k = i - r * p.topk;
      const int32_t region = __ldg(group + r * p.selected_row_stride + k);
      if (region >= 0 && region < p.bitmap_regions) {
        atomicOr(&bitmap[region >> 5], 1u << (region & 31));
      }
    }
    __syncthreads();
    for (int w = tid; w < words; w += kThreads) mine += __popc(bitmap[w]);
    __syncthreads();  // counted before the next group clears the bitmap
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
