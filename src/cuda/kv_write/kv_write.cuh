// One thread per 8 values of one token's K or V row of one head: a 16-byte
// bf16 load, and a 16-byte (bf16) or 8-byte (fp8) store.
#pragma once

#include "cuda/common/block_position.cuh"
#include "cuda/common/numerics.cuh"
#include "cuda/kv_write/params.h"

namespace step5::cuda {

// Writes vector v (of 2 D / 8: K then V) of step row t, head g, when the row
// is live and has a slot (`live`: rows >= it belong to padding requests).
template <class Storage>
__device__ __forceinline__ void write_kv_vector(const KvWriteParams& p, int64_t t, int g, int v,
                                                int64_t live) {
  if (t >= live) return;  // a row of a padding request
  const int64_t slot = __ldg(p.slot_mapping + t);
  if (slot < 0) return;  // padding token (engines mark them -1)
  const int64_t block = block_of(slot, p.block_shift, p.block_size);
  const int64_t token = token_in_block(slot, p.block_shift, p.block_size);
  if (block >= p.guard.num_blocks) {
    if (v == 0 && g == 0) report_fault(p.guard, DeviceFault::kv_slot, t, slot);
    return;
  }
  const bool is_value = v >= p.head_size / 8;
  const int d = (is_value ? v - p.head_size / 8 : v) * 8;
  const uint16_t* src = is_value ? p.value + t * p.value_stride_t + g * p.value_stride_g + d
                                 : p.key + t * p.key_stride_t + g * p.key_stride_g + d;
  const uint4 raw = *reinterpret_cast<const uint4*>(src);
  char* row = static_cast<char*>(p.cache) + block * p.block_stride + g * p.head_stride +
              token * p.token_stride;
  const int element = (is_value ? p.head_size : 0) + d;
  if constexpr (Storage::kFp8) {
    const float scale = is_value ? p.v_scale : p.k_scale;
    const uint16_t* h = reinterpret_cast<const uint16_t*>(&raw);
    uint32_t packed[2] = {0, 0};
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float x = __fdiv_rn(bf16_bits_to_float(h[k]), scale);
      packed[k / 4] |= static_cast<uint32_t>(float_to_fp8_bits(x)) << (8 * (k % 4));
    }
    *reinterpret_cast<uint2*>(row + element) = make_uint2(packed[0], packed[1]);
  } else {
    *reinterpret_cast<uint4*>(row + 2 * element) = raw;
  }
}

// Rows below this are written (uniform steps: query_start_loc[R]).
__device__ __forceinline__ int64_t kv_live_rows(const KvWriteParams& p) {
  return p.live_rows != nullptr ? __ldg(p.live_rows) : p.num_tokens;
}

// Thread `thread` of `threads` writes every threads-th vector.
template <class Storage>
__device__ __forceinline__ void write_kv_rows(const KvWriteParams& p, int64_t thread,
                                              int64_t threads) {
  const int vectors_per_row = 2 * p.head_size / 8;  // K then V
  const int64_t total = p.num_tokens * p.num_heads * vectors_per_row;
  const int64_t live = kv_live_rows(p);
  for (int64_t i = thread; i < total; i += threads) {
    const int64_t tg = i / vectors_per_row;
    write_kv_vector<Storage>(p, tg / p.num_heads, static_cast<int>(tg % p.num_heads),
                             static_cast<int>(i % vectors_per_row), live);
  }
}

template <class Storage>
__global__ void kv_write_kernel(KvWriteParams p) {
  write_kv_rows<Storage>(p, blockIdx.x * int64_t{blockDim.x} + threadIdx.x,
                         int64_t{gridDim.x} * blockDim.x);
}

}  // namespace step5::cuda
