#include "cuda/indexer/tc_launch.h"

#include "core/check.h"
#include "cuda/common/check.h"
#include "cuda/common/dispatch.h"
#include "cuda/common/programmatic.cuh"
#include "cuda/common/smem_limit.h"
#include "cuda/indexer/tc_kernel.cuh"

namespace step5::cuda {

size_t indexer_tc_smem_bytes(int tile_n, int index_dim, int summary_bytes, int num_requests,
                             int consumers, int stages) {
  // 1024 bytes of slack to align the base for the swizzled query atoms.
  return tc::indexer_smem_layout(tile_n, index_dim, summary_bytes, num_requests, consumers, stages)
             .total +
         1024u;
}

bool indexer_tc_supports(const LayerConfig& c) {
  // Di: whole 64-wide atoms of the query operand, at least 8 16-byte chunks
  // per fp8 summary row for the bank swizzle (tc_layout.cuh), and a power
  // of two so the copy loop splits chunks by shifts.
  const bool power_of_two = (c.index_dim & (c.index_dim - 1)) == 0;
  return c.index_heads <= indexer_tc_heads() && c.index_dim >= 128 && power_of_two &&
         c.index_dim <= indexer_tc_max_index_dim();
}

namespace {

template <class F>
void with_kernel(int tile_n, DType summary_dtype, F&& f) {
  dispatch_storage(summary_dtype, "summary_dtype", [&](auto tag) {
    using S = decltype(tag);
    switch (tile_n) {
      case 32: f(tc::indexer_tc_kernel<32, S>); return;
      case 64: f(tc::indexer_tc_kernel<64, S>); return;
      case 128: f(tc::indexer_tc_kernel<128, S>); return;
      case 256: f(tc::indexer_tc_kernel<256, S>); return;
      default:
        detail::fail(ErrorCode::invalid_argument,
                     detail::concat("cuda backend indexer: tile N expected 32, 64, 128 or 256, "
                                    "got ",
                                    tile_n));
    }
  });
}

}  // namespace

int indexer_tc_ctas_per_sm(int tile_n, DType summary_dtype, size_t smem) {
  int blocks = 0;
  with_kernel(tile_n, summary_dtype, [&](auto* kernel) {
    allow_max_smem(kernel);
    STEP5_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &blocks, kernel, indexer_tc_block_threads(), smem));
  });
  return blocks;
}

void launch_indexer_tc(const IndexerParams& p, DType summary_dtype, size_t max_smem,
                       cudaStream_t stream) {
  const int bytes = summary_dtype == DType::fp8_e4m3 ? 1 : 2;
  const size_t smem = indexer_tc_smem_bytes(p.tile_n, p.index_dim, bytes, p.rows.num_requests,
                                            p.consumers, p.stages);
  detail::require(smem <= max_smem && p.ctas > 0 && p.rows_per_unit > 0 && p.consumers >= 1 &&
                      p.consumers <= indexer_tc_max_consumers() && p.stages % p.consumers == 0 &&
                      p.stages >= indexer_tc_min_stages() && p.stages <= indexer_tc_max_stages() &&
                      p.index_heads <= indexer_tc_heads() && p.index_dim >= 128 &&
                      (p.index_dim & (p.index_dim - 1)) == 0,
                  ErrorCode::invalid_argument,
                  "cuda backend indexer: the plan's tensor-core schedule does not fit this "
                  "launch (smem ",
                  smem, " of ", max_smem, ", ctas ", p.ctas, ", rows per unit ", p.rows_per_unit,
                  ", consumers ", p.consumers, ", stages ", p.stages,
                  "); plan the step with the backend that runs it");
  with_kernel(p.tile_n, summary_dtype, [&](auto* kernel) {
    allow_max_smem(kernel);
    STEP5_CUDA_CHECK(launch_kernel(kernel, dim3(static_cast<unsigned>(p.ctas)),
                                   dim3(indexer_tc_block_threads()), smem, stream,
                                   p.programmatic_launch, p));
  });
  check_launch("indexer_tc_kernel");
}

}  // namespace step5::cuda
