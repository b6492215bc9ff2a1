// One warp per (request, candidate closing region). Region j closes in this
// step when its eighth row 8j+7 is among the request's new positions
// [start, seq_len): j in [start/8, seq_len/8). Each lane owns 8 of the Di
// values and runs the SPEC 3 formula in row order 0..7 with explicit
// round-to-nearest operations (no FMA contraction), as the host does, so the
// summaries match the cpu backend bit for bit.
#pragma once

#include "cuda/common/guard.h"
#include "cuda/common/numerics.cuh"
#include "cuda/summaries/params.h"

namespace step5::cuda {

// Whether request r's step rows (query rows [begin, begin + qlen), the last
// at position seq_len - 1) and ring entry can be used as they are: rows
// inside the step's n, a length that covers them, positions inside the
// block table, a ring entry inside the ring. Otherwise nothing of the
// request is read or written, and `report` records the fault.
__device__ __forceinline__ bool request_ok(const SummaryParams& p, int r, int32_t begin,
                                           int32_t qlen, int32_t seq_len, bool report) {
  DeviceFault fault = DeviceFault::none;
  int64_t value = seq_len;
  if (begin < 0 || qlen < 0 || int64_t{begin} + qlen > p.num_tokens || seq_len < qlen) {
    fault = DeviceFault::bad_position;
  } else if (seq_len > 0 && !column_ok(p.guard, (seq_len - 1) / p.block_size)) {
    fault = DeviceFault::past_block_table;
  } else {
    value = __ldg(p.ring_index + r);
    if (value < 0 || value >= p.num_ring_entries) fault = DeviceFault::ring_entry;
  }
  if (fault == DeviceFault::none) return true;
  if (report) report_fault(p.guard, fault, r, value);
  return false;
}

struct RowSource {
  const uint16_t* key;
  float z;
};

__device__ __forceinline__ RowSource summary_row(const SummaryParams& p, int r, int32_t begin,
                                                 int32_t start, int32_t position) {
  if (position >= start) {
    const int64_t t = begin + (position - start);
    return {p.index_key + t * p.index_key_stride, __ldg(p.index_z + t * p.index_z_stride)};
  }
  const char* row = static_cast<const char*>(p.ring) +
                    __ldg(p.ring_index + r) * p.ring_entry_stride +
                    (position % p.ring_capacity) * p.ring_row_bytes;
  return {reinterpret_cast<const uint16_t*>(row),
          *reinterpret_cast<const float*>(row + 2 * p.index_dim)};
}

// One warp; `lane` owns values lane*8 + 256k.
template <class Storage>
__device__ void summarize_region(const SummaryParams& p, int r, int32_t begin, int32_t start,
                                 int32_t region, int lane) {
  RowSource rows[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) rows[i] = summary_row(p, r, begin, start, 8 * region + i);
  float max_z = rows[0].z;
#pragma unroll
  for (int i = 1; i < 8; ++i) max_z = fmaxf(max_z, rows[i].z);
  float a[8];
  float den = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    // exp in double, rounded once to float: the correctly rounded expf,
    // which the host's std::exp(float) also returns (device expf may be 2
    // ulp off, and cancellation in num can magnify that past one ulp of S).
    a[i] = static_cast<float>(exp(static_cast<double>(__fsub_rn(rows[i].z, max_z))));
    den = __fadd_rn(den, a[i]);
  }

  const int32_t position = 8 * region;
  const int64_t block = __ldg(p.block_table + r * p.block_table_stride + position / p.block_size);
  if (!block_ok(p.guard, block)) {
    if (lane == 0) report_fault(p.guard, DeviceFault::summary_block, r, block);
    return;
  }
  char* out = static_cast<char*>(p.summaries) + block * p.summary_block_stride +
              ((position % p.block_size) / 8) * p.summary_region_stride;
  for (int d = lane * 8; d < p.index_dim; d += 32 * 8) {
    float num[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint4 raw = *reinterpret_cast<const uint4*>(rows[i].key + d);
      const uint16_t* k = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        num[e] = __fadd_rn(num[e], __fmul_rn(a[i], bf16_bits_to_float(k[e])));
    }
    if constexpr (Storage::kFp8) {
      uint32_t packed[2] = {0, 0};
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        packed[e / 4] |= static_cast<uint32_t>(float_to_fp8_bits(__fdiv_rn(num[e], den)))
                         << (8 * (e % 4));
      }
      *reinterpret_cast<uint2*>(out + d) = make_uint2(packed[0], packed[1]);
    } else {
      uint32_t packed[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        packed[e] =
            static_cast<uint32_t>(float_to_bf16_bits(__fdiv_rn(num[2 * e], den))) |
            (static_cast<uint32_t>(float_to_bf16_bits(__fdiv_rn(num[2 * e + 1], den))) << 16);
      }
      *reinterpret_cast<uint4*>(out + 2 * d) =
          make_uint4(packed[0], packed[1], packed[2], packed[3]);
    }
  }
}

// Grid (R, min(max_closing, 65535)); y strides over a long prefill's regions.
template <class Storage>
__global__ void summaries_kernel(SummaryParams p) {
  const int r = blockIdx.x;
  const int32_t begin = __ldg(p.query_start_loc + r);
  const int32_t seq_len = __ldg(p.seq_lens + r);
  const int32_t qlen = __ldg(p.query_start_loc + r + 1) - begin;
  const int32_t start = seq_len - qlen;
  if (!request_ok(p, r, begin, qlen, seq_len, threadIdx.x == 0 && blockIdx.y == 0)) return;
  for (int32_t region = start / 8 + static_cast<int32_t>(blockIdx.y); region < seq_len / 8;
       region += static_cast<int32_t>(gridDim.y)) {
    summarize_region<Storage>(p, r, begin, start, region, static_cast<int>(threadIdx.x));
  }
}

// Stores step row t (position `position` of request r) in the request's
// ring; threads [thread, threads) of the caller share the copy.
__device__ __forceinline__ void write_ring_row(const SummaryParams& p, int r, int64_t t,
                                               int32_t position, int thread, int threads) {
  char* row = static_cast<char*>(p.ring) + __ldg(p.ring_index + r) * p.ring_entry_stride +
              (position % p.ring_capacity) * p.ring_row_bytes;
  const uint16_t* key = p.index_key + t * p.index_key_stride;
  for (int d = thread * 8; d < p.index_dim; d += threads * 8) {
    *reinterpret_cast<uint4*>(row + 2 * d) = *reinterpret_cast<const uint4*>(key + d);
  }
  if (thread == 0) {
    *reinterpret_cast<float*>(row + 2 * p.index_dim) = __ldg(p.index_z + t * p.index_z_stride);
  }
}

// Whether step row t of request r (query rows [begin, begin + qlen), the
// last at position seq_len - 1) is among the last min(qlen, capacity) rows,
// the ones the ring keeps; sets its position.
__device__ __forceinline__ bool ring_keeps(const SummaryParams& p, int r, int64_t t,
                                           int32_t& position) {
  const int32_t begin = __ldg(p.query_start_loc + r);
  const int32_t qlen = __ldg(p.query_start_loc + r + 1) - begin;
  const int32_t m = min(qlen, p.ring_capacity);
  const int32_t seq_len = __ldg(p.seq_lens + r);
  position = seq_len - qlen + static_cast<int32_t>(t - begin);
  return t >= begin + qlen - m && request_ok(p, r, begin, qlen, seq_len, t == begin + qlen - 1);
}

}  // namespace step5::cuda
