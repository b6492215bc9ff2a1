// Definition of run_paged<D>: picks the storage, page-source and depth
// variant, sets the dynamic shared memory and launches.
#pragma once

#include <cuda_runtime.h>

#include "core/check.h"
#include "cuda/attention/instances.h"
#include "cuda/attention/paged_kernel.cuh"
#include "cuda/common/check.h"
#include "cuda/common/programmatic.cuh"
#include "cuda/common/smem_limit.h"

namespace step5::cuda::attn {

template <class T>
void launch_variant(const PagedAttentionParams& p, int num_splits, cudaStream_t stream) {
  const int64_t max_pages = T::kIsCsa ? csa_max_pages(p.topk) : swa_max_pages(p.window);
  const int64_t table_pages = block_table_pages(max_pages);
  const size_t smem = T::smem_bytes(max_pages, table_pages);
  // One head tile of 8 for H/G <= 8 (the Step5 shapes), two up to 16.
  auto* kernel = row_head_tiles(p.num_heads / p.num_kv_heads) == 1 ? &paged_attention_kernel<T, 1>
                                                                   : &paged_attention_kernel<T, 2>;
  allow_max_smem(kernel);
  const int64_t ctas = p.num_rows * p.num_kv_heads * num_splits;
  STEP5_CUDA_CHECK(launch_kernel(kernel, dim3(static_cast<unsigned>(ctas)),
                                 dim3(attention_threads()), smem, stream, p.programmatic_launch, p,
                                 num_splits, static_cast<int32_t>(max_pages),
                                 static_cast<int32_t>(table_pages)));
  check_launch("paged_attention_kernel");
}

// The default tile, or the compact one (fewer stages, tiles.h) where the
// plan chose it for a GPU with less shared memory.
template <int D, bool kFp8, bool kCsa>
void launch_depth(const PagedAttentionParams& p, int num_splits, cudaStream_t stream) {
  using Default = Tile<D, kFp8, kCsa>;
  if (p.stages == 0 || p.stages == Default::kStages) {
    launch_variant<Default>(p, num_splits, stream);
    return;
  }
  if constexpr (has_compact_tile<D, kFp8, kCsa>()) {
    using Compact = Tile<D, kFp8, kCsa, attention_compact_stages(kFp8)>;
    if (p.stages == Compact::kStages) {
      launch_variant<Compact>(p, num_splits, stream);
      return;
    }
  }
  detail::fail(
      ErrorCode::invalid_argument,
      detail::concat("paged attention: stages ", p.stages, " has no compiled tile for D = ", D,
                     kFp8 ? " fp8" : " bf16", "; plan the step with the backend that runs it"));
}

template <int D>
void run_paged(const PagedAttentionParams& p, int num_splits, cudaStream_t stream) {
  const bool fp8 = p.kv_dtype == DType::fp8_e4m3;
  const bool csa = p.selected != nullptr;
  if (fp8) {
    if (csa) {
      launch_depth<D, true, true>(p, num_splits, stream);
    } else {
      launch_depth<D, true, false>(p, num_splits, stream);
    }
  } else {
    if (csa) {
      launch_depth<D, false, true>(p, num_splits, stream);
    } else {
      launch_depth<D, false, false>(p, num_splits, stream);
    }
  }
}

}  // namespace step5::cuda::attn
