// Device-side guards. In CUDA-graph replays the host never sees the block
// tables, slots and sequence lengths the kernels read, so every kernel
// checks what it is about to dereference against the bounds below, and on
// a fault records it (DeviceStatus, include/step5/step.h) and stays in
// bounds: writes are skipped, rows that needed the data get NaN output.
#pragma once

#include <cstdint>

#include "step5/step.h"

namespace step5::cuda {

struct DeviceGuard {
  int64_t num_blocks = 0;        // blocks of the cache the ids index; ids outside are faults
  int32_t block_table_cols = 0;  // entries of one block-table row
  uint32_t* status = nullptr;    // DeviceStatus (u32 [4]) device; null = faults not recorded
};

#if defined(__CUDACC__)
// Records a fault: the first one's kind, row and value, and the count.
__device__ __forceinline__ void report_fault(const DeviceGuard& guard, DeviceFault kind,
                                             int64_t row, int64_t value) {
  if (guard.status == nullptr) return;
  atomicAdd(guard.status + 3, 1u);
  if (atomicCAS(guard.status, 0u, static_cast<uint32_t>(kind)) == 0u) {
    guard.status[1] = static_cast<uint32_t>(row);
    guard.status[2] = static_cast<uint32_t>(value);
  }
}

// Whether block-table column `col` of a request is inside the table.
__device__ __forceinline__ bool column_ok(const DeviceGuard& guard, int64_t col) {
  return col >= 0 && col < guard.block_table_cols;
}

__device__ __forceinline__ bool block_ok(const DeviceGuard& guard, int64_t block) {
  return block >= 0 && block < guard.num_blocks;
}
#endif

}  // namespace step5::cuda
