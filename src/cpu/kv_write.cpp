// write_kv: this step's K and V rows into the paged cache at slot_mapping.
#include <cstring>

#include "cpu/cache_access.h"
#include "cpu/kernels.h"

namespace step5::cpu::kernel {

namespace {

void write_row(const LayerConfig& c, int64_t t, int64_t slot, const TensorView& key,
               const TensorView& value, const KVCacheView& kv) {
  const int D = c.head_size;
  const auto value_offset = static_cast<size_t>(D) * dtype_size(c.kv_dtype);
  const int64_t block = slot / c.block_size;
  const int64_t offset = slot % c.block_size;
  for (int g = 0; g < c.num_kv_heads; ++g) {
    std::byte* row = kv_row(kv, block, g, offset);
    store_row(kv.dtype, at<const uint16_t>(key, t, g), c.k_scale, D, row);
    store_row(kv.dtype, at<const uint16_t>(value, t, g), c.v_scale, D, row + value_offset);
  }
}

}  // namespace

void write_kv(const StepArgs& a, const TensorView& key, const TensorView& value,
              const KVCacheView& kv) {
  a.pool.parallel_for(a.rows.live_rows, [&](int64_t t, int) {
    const int64_t slot = *at<const int64_t>(a.step.slot_mapping, t);
    if (slot >= 0) write_row(a.config, t, slot, key, value, kv);
  });
}

void write_kv_slots(const LayerConfig& config, ThreadPool& pool, const TensorView& slot_mapping,
                    const TensorView& key, const TensorView& value, const KVCacheView& kv) {
  pool.parallel_for(slot_mapping.shape[0], [&](int64_t t, int) {
    const int64_t slot = *at<const int64_t>(slot_mapping, t);
    if (slot >= 0) write_row(config, t, slot, key, value, kv);
  });
}

void zero_rows(const LayerConfig& config, const TensorView& output, int64_t begin, int64_t end) {
  const size_t bytes = static_cast<size_t>(config.head_size) * sizeof(uint16_t);
  for (int64_t t = begin; t < end; ++t) {
    for (int h = 0; h < config.num_heads; ++h) std::memset(at<uint16_t>(output, t, h), 0, bytes);
  }
}

}  // namespace step5::cpu::kernel
