// update_summaries: closes the regions whose eighth row this step writes
// (SPEC 3) and keeps each request's ring of raw index rows current.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "cpu/cache_access.h"
#include "cpu/kernels.h"

namespace step5::cpu::kernel {

namespace {

// validate_config bounds index_dim; the summary accumulator lives on the stack.
constexpr int kMaxIndexDim = 1024;

struct IndexRow {
  const uint16_t* key;  // Di bf16
  float z;
};

// Source of position q of request r: the step's input at and after the
// step's first position s, the ring (still holding the previous steps'
// rows) before it.
IndexRow index_row(const StepArgs& a, const TensorView& index_key, const TensorView& index_z,
                   const RingView& ring, int32_t r, int64_t s, int64_t q) {
  const LayerConfig& c = a.config;
  if (q >= s) {
    const int64_t t = a.rows.query_start[r] + (q - s);
    return {at<const uint16_t>(index_key, t), *at<const float>(index_z, t)};
  }
  const int32_t entry = *at<const int32_t>(a.step.ring_index, r);
  const std::byte* row = ring_row(ring, ring_row_bytes(c), entry, q % c.ring_capacity());
  float z;
  std::memcpy(&z, row + static_cast<size_t>(c.index_dim) * sizeof(uint16_t), sizeof z);
  return {reinterpret_cast<const uint16_t*>(row), z};
}

// S_j = sum_i a_i k_i / sum_i a_i with a_i = exp(z_i - max z), fp32 in row
// order 0..7, rounded once to the summary dtype.
void summarize(const StepArgs& a, const TensorView& index_key, const TensorView& index_z,
               const SummaryCacheView& summaries, const RingView& ring, int32_t r, int64_t s,
               int64_t region) {
  const LayerConfig& c = a.config;
  const int Di = c.index_dim;
  std::array<IndexRow, kRegionSize> rows{};
  float max_z = -INFINITY;
  for (int i = 0; i < kRegionSize; ++i) {
    rows[static_cast<size_t>(i)] =
        index_row(a, index_key, index_z, ring, r, s, region * kRegionSize + i);
    max_z = std::max(max_z, rows[static_cast<size_t>(i)].z);
  }
  std::array<float, kMaxIndexDim> num{};
  float den = 0.0f;
  for (const IndexRow& row : rows) {
    const float weight = std::exp(row.z - max_z);
    den += weight;
    for (int d = 0; d < Di; ++d) {
      // Product and sum as two statements: no compiler may fuse them into an
      // FMA, so every backend rounds the same two operations.
      const float term = weight * bf16_to_float(row.key[d]);
      num[static_cast<size_t>(d)] += term;
    }
  }
  const int64_t block = block_of(a.step, r, region * kRegionSize, c.block_size);
  std::byte* dst = summary_row(summaries, block, region % (c.block_size / kRegionSize));
  for (int d = 0; d < Di; ++d) {
    const float value = num[static_cast<size_t>(d)] / den;
    if (summaries.dtype == DType::bf16) {
      reinterpret_cast<uint16_t*>(dst)[d] = float_to_bf16(value);
    } else {
      reinterpret_cast<uint8_t*>(dst)[d] = float_to_fp8_e4m3(value);
    }
  }
}

}  // namespace

void update_summaries(const StepArgs& a, const TensorView& index_key, const TensorView& index_z,
                      const SummaryCacheView& summaries, const RingView& ring) {
  const LayerConfig& c = a.config;
  const StepRows& rows = a.rows;
  const int32_t R = a.plan.num_requests;
  // Every summary first: rows before a request's step start are read from
  // the ring as the previous steps left it. Requests without rows (padding)
  // close nothing and touch no ring.
  for (int32_t r = 0; r < R; ++r) {
    if (rows.query_start[r + 1] == rows.query_start[r]) continue;
    const int64_t e = rows.seq_len[r];
    const int64_t s = e - (rows.query_start[r + 1] - rows.query_start[r]);
    // Region j closes here when s <= 8j + 7 < e.
    for (int64_t j = s / kRegionSize; j < e / kRegionSize; ++j) {
      summarize(a, index_key, index_z, summaries, ring, r, s, j);
    }
  }
  // Then the ring keeps the last `capacity` rows of each request's step: the
  // open region's rows and the drafts a later step may rewrite.
  const int capacity = c.ring_capacity();
  const size_t row_bytes = ring_row_bytes(c);
  const size_t key_bytes = static_cast<size_t>(c.index_dim) * sizeof(uint16_t);
  for (int32_t r = 0; r < R; ++r) {
    const int32_t begin = rows.query_start[r];
    const int32_t end = rows.query_start[r + 1];
    if (end == begin) continue;
    const int64_t e = rows.seq_len[r];
    const int32_t entry = *at<const int32_t>(a.step.ring_index, r);
    for (int32_t t = std::max(begin, end - capacity); t < end; ++t) {
      const int64_t q = e - (end - t);
      std::byte* row = ring_row(ring, row_bytes, entry, q % capacity);
      std::memcpy(row, at<const uint16_t>(index_key, t), key_bytes);
      std::memcpy(row + key_bytes, at<const float>(index_z, t), sizeof(float));
    }
  }
}

}  // namespace step5::cpu::kernel
