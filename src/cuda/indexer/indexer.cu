#include "core/check.h"
#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/indexer/indexer.cuh"

namespace step5::cuda {

namespace {
constexpr int64_t kMaxGridY = 65535;        // CUDA's limit on gridDim.y
constexpr size_t kDefaultSmem = 48 * 1024;  // usable without opting in
}  // namespace

size_t indexer_smem_bytes(int num_groups, int index_heads, int index_dim) {
  const size_t gi = static_cast<size_t>(num_groups) * static_cast<size_t>(index_heads);
  return gi * static_cast<size_t>(index_dim) * 4u + gi * 4u;
}

void launch_indexer(const IndexerParams& params, DType summary_dtype, size_t max_smem,
                    cudaStream_t stream) {
  if (params.num_rows == 0 || params.columns == 0) return;
  const size_t smem = indexer_smem_bytes(params.num_groups, params.index_heads, params.index_dim);
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
    if (smem > kDefaultSmem) {
      STEP5_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem)));
    }
    kernel<<<grid, indexer_warps() * 32, smem, stream>>>(params);
  });
  check_launch("indexer_kernel");
}

}  // namespace step5::cuda
