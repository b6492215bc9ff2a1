// Indexer scores (SPEC 4): score(t, g, j) for rows x closed regions.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/rows.h"
#include "step5/tensor.h"

namespace step5::cuda {

struct IndexerParams {
  RowMeta rows;                           // request / position of each step row
  int64_t row_begin = 0;                  // first step row of this launch
  int64_t num_rows = 0;                   // rows of this launch (grid x)
  const uint16_t* index_query = nullptr;  // bf16 [n, G, I, Di] by step row; not null
  int64_t query_stride_t = 0;             // elements
  int64_t query_stride_g = 0;
  int64_t query_stride_h = 0;
  const float* index_weight = nullptr;  // f32 [n, G, I] by step row; not null
  int64_t weight_stride_t = 0;          // elements
  int64_t weight_stride_g = 0;
  const int32_t* block_table = nullptr;  // i32 [R, max_blocks]; not null
  int64_t block_table_stride = 0;
  const void* summaries = nullptr;    // summary_dtype, as SummaryParams; not null
  int64_t summary_block_stride = 0;   // bytes
  int64_t summary_region_stride = 0;  // bytes
  float* scores = nullptr;            // f32 [num_rows, G, columns] by launch row; not null
  int64_t scores_stride_t = 0;        // elements
  int64_t scores_stride_g = 0;
  int32_t columns = 0;      // regions covered (grid y tiles); >= every row's C
  int32_t num_groups = 0;   // G
  int32_t index_heads = 0;  // I
  int32_t index_dim = 0;    // Di, a multiple of 8, <= 1024
  int32_t block_size = 0;   // B
  int32_t skip_topk = -1;   // rows with C <= skip_topk are not scored (-1: none;
                            // forward passes K: selection reads no scores there)
  bool fill_tail = true;    // write -inf for C <= j < columns
};

// Dynamic shared memory one CTA needs; the launcher throws when it exceeds
// what the device allows.
size_t indexer_smem_bytes(int num_groups, int index_heads, int index_dim);

void launch_indexer(const IndexerParams& params, DType summary_dtype, size_t max_smem,
                    cudaStream_t stream);

}  // namespace step5::cuda
