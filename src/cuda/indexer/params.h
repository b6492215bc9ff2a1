// Indexer scores (SPEC 4): score(t, g, j) for rows x closed regions.
//
// Two kernels compute them; the plan picks one per layer (LayerSchedule):
//   - tensor_core (sm_90a wgmma): work is (request, block of query rows),
//     each streamed once over its summaries in tiles of 64 or 128 regions;
//     every query row of the block (rows x G x I index queries) is scored
//     from one read of each summary. A persistent grid (one CTA per SM, a
//     producer and one or two consumer warpgroups) splits the step's tiles
//     evenly; the split is derived on the device from seq_lens, so a CUDA
//     graph replays with new lengths.
//   - generic (fp32 FFMA): one CTA per (row, 64-region tile); any shape.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/guard.h"
#include "cuda/common/rows.h"
#include "step5/step.h"
#include "step5/tensor.h"

namespace step5::cuda {

struct IndexerParams {
  RowMeta rows;                           // request / position of each step row
  int64_t row_begin = 0;                  // first step row of this launch (a scoring chunk)
  int64_t num_rows = 0;                   // rows of this launch
  const uint16_t* index_query = nullptr;  // bf16 [n, G, I, Di] by step row; not null
  int64_t query_stride_t = 0;             // elements
  int64_t query_stride_g = 0;
  int64_t query_stride_h = 0;
  const float* index_weight = nullptr;  // f32 [n, G, I] by step row; not null
  int64_t weight_stride_t = 0;          // elements
  int64_t weight_stride_g = 0;
  const int32_t* block_table = nullptr;  // i32 [R, max_blocks]; not null
  int64_t block_table_stride = 0;
  const void* summaries = nullptr;    // summary_dtype [blocks, B/8, Di] at the byte strides
  int64_t summary_block_stride = 0;   // bytes
  int64_t summary_region_stride = 0;  // bytes
  float* scores = nullptr;            // f32 [num_rows, G, columns] by launch row; not null
  int64_t scores_stride_t = 0;        // elements
  int64_t scores_stride_g = 0;
  uint32_t* row_max = nullptr;  // u32 [num_rows, G]: max order key (select/score_key.h) of
                                // the row's scores; zeroed by the caller; tensor-core path
                                // only; may be null (not tracked)
  int32_t columns = 0;          // regions covered; >= every row's C
  int32_t num_groups = 0;       // G
  int32_t index_heads = 0;      // I
  int32_t index_dim = 0;        // Di, a multiple of 8, <= 1024
  int32_t block_size = 0;       // B
  int32_t block_shift = -1;     // log2(B / 8) when B / 8 is a power of two, else -1
  int32_t skip_topk = -1;       // rows with C <= skip_topk are not scored (-1: none;
                                // forward passes K: selection reads no scores there)
  bool fill_tail = true;        // generic path: write -inf for C <= j < columns

  // Tensor-core path (from LayerSchedule).
  int32_t rows_per_unit = 0;  // query rows per work unit
  int32_t tile_n = 0;         // wgmma N (32, 64, 128 or 256)
  int32_t ctas = 0;           // persistent grid
  int32_t consumers = 0;      // consumer warpgroups per CTA, 1 or 2
  int32_t stages = 0;         // summary tiles per CTA's pipeline, >= 2, a multiple of consumers
  // Launched with programmatic stream serialization (LayerSchedule::
  // programmatic_launch); the kernel waits for the previous grid before
  // reading anything either way.
  bool programmatic_launch = false;

  DeviceGuard guard;  // num_blocks of the summary cache, block-table width; a region
                      // whose block faults scores as zeros
};

// Dynamic shared memory of the tensor-core kernel for a layer (Di, summary
// bytes per value), tile N, R requests, a consumer count and a stage count,
// alignment slack included.
size_t indexer_tc_smem_bytes(int tile_n, int index_dim, int summary_bytes, int num_requests,
                             int consumers, int stages);
// Dynamic shared memory of the generic kernel for a layer (every index
// query of one row in fp32, and its weights).
size_t indexer_generic_smem_bytes(const LayerConfig& config);
// Whether the tensor-core kernel takes this layer shape at all (I <= 4,
// Di 128, 256 or 512).
bool indexer_tc_supports(const LayerConfig& config);

void launch_indexer(const IndexerParams& params, IndexerPath path, DType summary_dtype,
                    size_t max_smem, cudaStream_t stream);

// Writes -inf into scores (t, g, j) for C(t) <= j < columns: the tail the
// single operation indexer_scores promises and forwards never read.
void launch_score_tail(const IndexerParams& params, cudaStream_t stream);

}  // namespace step5::cuda
