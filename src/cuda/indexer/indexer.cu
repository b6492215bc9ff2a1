// Host side of the indexer family: the generic kernel's launch, the
// -inf tail of the single operation, and the dispatch between paths.
#include <math_constants.h>

#include "core/check.h"
#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/smem_limit.h"
#include "cuda/indexer/indexer.cuh"
#include "cuda/indexer/tc_launch.h"

namespace step5::cuda {

namespace {

constexpr int64_t kMaxGridY = 65535;        // CUDA's limit on gridDim.y
constexpr size_t kDefaultSmem = 48 * 1024;  // usable without opting in

size_t generic_smem_bytes(int num_groups, int index_heads, int index_dim) {
  const size_t gi = static_cast<size_t>(num_groups) * static_cast<size_t>(index_heads);
  return gi * static_cast<size_t>(index_dim) * 4u + gi * 4u;
}

void launch_generic(const IndexerParams& params, DType summary_dtype, size_t max_smem,
                    cudaStream_t stream) {
  const size_t smem = generic_smem_bytes(params.num_groups, params.index_heads, params.index_dim);
  detail::require(smem <= max_smem, ErrorCode::unsupported,
                  "cuda backend indexer: G*I*Di*4 bytes of index queries in shared memory "
                  "expected <= ",
                  max_smem, " (device limit), got ", smem, " (G=", params.num_groups,
                  " I=", params.index_heads, " Di=", params.index_dim, ")");
  detail::require(params.index_dim <= 256 * indexer_max_chunks(), ErrorCode::unsupported,
                  "cuda backend indexer: index_dim expected <= ", 256 * indexer_max_chunks(),
                  ", got ", params.index_dim);
  const int64_t tiles =
      (params.columns + indexer_regions_per_cta() - 1) / indexer_regions_per_cta();
  detail::require(tiles <= kMaxGridY, ErrorCode::unsupported,
                  "cuda backend indexer: closed regions expected <= ",
                  kMaxGridY * indexer_regions_per_cta(), ", got ", params.columns);
  const dim3 grid(static_cast<unsigned>(params.num_rows), static_cast<unsigned>(tiles));
  dispatch_storage(summary_dtype, "summary_dtype", [&](auto tag) {
    auto* kernel = indexer_kernel<decltype(tag)>;
    if (smem > kDefaultSmem) allow_max_smem(kernel);
    kernel<<<grid, indexer_warps() * 32, smem, stream>>>(params);
  });
  check_launch("indexer_kernel");
}

// Grid-stride over (row, group, column): -inf where column >= C(row).
__global__ void score_tail_kernel(const IndexerParams p) {
  const int64_t per_row = int64_t{p.num_groups} * p.columns;
  const int64_t total = p.num_rows * per_row;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t local = i / per_row;
    const int32_t g = static_cast<int32_t>((i % per_row) / p.columns);
    const int32_t j = static_cast<int32_t>(i % p.columns);
    int32_t request = 0, position = 0;
    row_of(p.rows, p.row_begin + local, request, position);
    if (j >= position / 8)
      p.scores[local * p.scores_stride_t + g * p.scores_stride_g + j] = -CUDART_INF_F;
  }
}

}  // namespace

size_t indexer_generic_smem_bytes(const LayerConfig& c) {
  return generic_smem_bytes(c.num_kv_heads, c.index_heads, c.index_dim);
}

void launch_indexer(const IndexerParams& params, IndexerPath path, DType summary_dtype,
                    size_t max_smem, cudaStream_t stream) {
  if (params.num_rows == 0 || params.columns == 0 || path == IndexerPath::none) return;
  if (path == IndexerPath::tensor_core) {
    launch_indexer_tc(params, summary_dtype, max_smem, stream);
  } else {
    launch_generic(params, summary_dtype, max_smem, stream);
  }
}

void launch_score_tail(const IndexerParams& params, cudaStream_t stream) {
  const int64_t total = params.num_rows * params.num_groups * int64_t{params.columns};
  if (total == 0) return;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 8192);
  score_tail_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(params);
  check_launch("score_tail_kernel");
}

}  // namespace step5::cuda
