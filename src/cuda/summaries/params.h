// Region summaries (SPEC 3) and the per-request ring of open-region rows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/guard.h"
#include "step5/tensor.h"

namespace step5::cuda {

// Shared by the summary and the ring-write kernels.
struct SummaryParams {
  const uint16_t* index_key = nullptr;  // bf16 [n, Di], row stride below; not null
  int64_t index_key_stride = 0;         // elements between rows
  const float* index_z = nullptr;       // f32 [n], element stride below; not null
  int64_t index_z_stride = 0;
  const int32_t* query_start_loc = nullptr;  // i32 [R+1] device; not null
  const int32_t* seq_lens = nullptr;         // i32 [R] device; not null
  const int32_t* block_table = nullptr;      // i32 [R, max_blocks], row stride below; not null
  int64_t block_table_stride = 0;
  const int32_t* ring_index = nullptr;  // i32 [R] ring entry of each request; not null
  void* summaries = nullptr;            // summary_dtype; region i of block b at
                                        // b * block_stride + i * region_stride bytes; not null
  int64_t summary_block_stride = 0;     // bytes
  int64_t summary_region_stride = 0;    // bytes
  void* ring = nullptr;                 // rows [index_key Di bf16 | z f32] of ring_row_bytes at
                                        // entry * entry_stride + slot * row_bytes; not null
  int64_t ring_entry_stride = 0;        // bytes
  int64_t ring_row_bytes = 0;           // bytes
  int32_t ring_capacity = 0;            // rows per entry; slot = position % capacity
  int32_t num_requests = 0;             // R
  int32_t max_closing = 0;              // regions any request can close this step (grid y)
  int32_t index_dim = 0;                // Di, a multiple of 8
  int32_t block_size = 0;               // B
  int64_t num_tokens = 0;               // n: rows of index_key / index_z
  int64_t num_ring_entries = 0;         // ring entries; ring_index outside is a fault
  DeviceGuard guard;                    // num_blocks of the summary cache, block-table width
};

// Summarizes every region whose eighth row this step writes, reading rows
// of positions before the step from the ring and the rest from the input.
void launch_summaries(const SummaryParams& params, DType summary_dtype, cudaStream_t stream);
// Then stores the last min(query_len, capacity) rows of each request in its
// ring. A separate launch, so the summaries above read the old ring.
void launch_ring_write(const SummaryParams& params, cudaStream_t stream);

}  // namespace step5::cuda
