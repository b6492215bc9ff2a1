// KV write (SPEC 6): stores this step's key and value rows at their slots.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/guard.h"
#include "step5/tensor.h"

namespace step5::cuda {

struct KvWriteParams {
  const uint16_t* key = nullptr;    // bf16 [n, G, D], element strides below; not null
  const uint16_t* value = nullptr;  // bf16 [n, G, D], element strides below; not null
  int64_t key_stride_t = 0;         // elements between tokens
  int64_t key_stride_g = 0;         // elements between heads
  int64_t value_stride_t = 0;
  int64_t value_stride_g = 0;
  const int64_t* slot_mapping = nullptr;  // i64 [n] block * B + offset; not null; < 0 skipped
  void* cache = nullptr;                  // kv_dtype; K||V of (block, head, token) at the byte
                                          // strides below; not null
  int64_t block_stride = 0;               // bytes
  int64_t head_stride = 0;                // bytes
  int64_t token_stride = 0;               // bytes
  int64_t num_tokens = 0;                 // n
  int32_t num_heads = 0;                  // G
  int32_t head_size = 0;                  // D, a multiple of 8
  int32_t block_size = 0;                 // B
  int32_t block_shift = -1;               // log2(B) when B is a power of two, else -1
  float k_scale = 1.0f;                   // fp8: stored = e4m3(k / k_scale)
  float v_scale = 1.0f;
  DeviceGuard guard;  // num_blocks of the cache: slots past it are faults (recorded when
                      // guard.status is set; write_kv without a plan only skips them)
  const int32_t* live_rows = nullptr;  // device i32: rows >= *live_rows are skipped (uniform
                                       // steps: query_start_loc[R], padding requests); null = all
};

void launch_kv_write(const KvWriteParams& params, DType kv_dtype, cudaStream_t stream);

// Converts `count` floats with the kv write's fp8 rounding (check tool: the
// device conversion must equal step5::float_to_fp8_e4m3 bit for bit).
// in: f32 [count] device; out: u8 [count] device.
void launch_fp8_convert(const float* in, uint8_t* out, int64_t count, cudaStream_t stream);

// The attention's and indexer's e4m3 -> f16x2 / bf16x2 conversions
// (numerics.cuh: one instruction from sm_89, an sm_80 fallback in the
// compute_80 PTX) for every pair of bytes p = 0..65535: out[3p] =
// e4m3x2_to_f16x2(p), out[3p + 1] = e4m3x2_hi_to_f16x2(p << 16),
// out[3p + 2] = e4m3x2_to_bf16x2(p). out: u32 [3 * 65536] device.
void launch_e4m3_widen(uint32_t* out, cudaStream_t stream);

}  // namespace step5::cuda
