#include "cpu/checks.h"

#include "core/check.h"
#include "core/plan.h"
#include "core/validate.h"
#include "cpu/cache_access.h"

namespace step5::cpu {

namespace {

constexpr Device kHost = Device::host;
using detail::require;

}  // namespace

StepDesc views_only(const StepDesc& step) {
  StepDesc s = step;
  s.host_query_start_loc = nullptr;
  if (!step.seq_lens_upper_bound) s.host_seq_lens = nullptr;
  s.host_block_table = nullptr;
  s.host_slot_mapping = nullptr;
  s.host_ring_index = nullptr;
  return s;
}

void check_step(const LayerConfig& c, const StepDesc& step, const StepPlan& plan, LayerKind kind,
                const char* op) {
  detail::validate_step(c, step, plan, kHost);
  require(c.kind == kind, ErrorCode::invalid_argument, op, ": config.kind expected ",
          layer_kind_name(kind), ", got ", layer_kind_name(c.kind));
}

// The plan read every block id, slot and ring entry from the step's views,
// so these are O(1) comparisons with the caches' sizes.
void check_kv(const LayerConfig& c, const StepPlan& plan, const KVCacheView& kv) {
  detail::validate_kv_cache(c, kv, kHost);
  detail::validate_block_ids(c, plan, kv.num_blocks);
}

void check_summaries(const LayerConfig& c, const StepPlan& plan,
                     const SummaryCacheView& summaries) {
  detail::validate_summary_cache(c, summaries, kHost);
  detail::validate_block_ids(c, plan, summaries.num_blocks);
}

void check_ring(const LayerConfig& c, const StepPlan& plan, const RingView& ring) {
  detail::validate_ring(c, ring, kHost);
  detail::validate_ring_ids(plan, ring.num_entries);
}

// Entries are -1 or strictly ascending in 0..C-1.
void check_selection_contents(const LayerConfig& c, const StepRows& rows, RowRange range,
                              const TensorView& selected) {
  for (int64_t i = 0; i < range.size(); ++i) {
    const int32_t position = rows.row_position[range.begin + i];
    const int32_t C = detail::closed_regions(position);
    for (int g = 0; g < c.num_kv_heads; ++g) {
      const int32_t* regions = at<const int32_t>(selected, i, g);
      int32_t previous = -1;
      for (int k = 0; k < c.topk; ++k) {
        const int32_t j = regions[k];
        if (j == -1) continue;
        require(j > previous && j < C, ErrorCode::out_of_range, "selected[", i, "][", g, "][", k,
                "]: expected -1 or a closed region above the previous entry (", previous, ") and ",
                "below C = ", C, " for position ", position, ", got ", j);
        previous = j;
      }
    }
  }
}

void check_slot_write(const LayerConfig& c, const TensorView& slot_mapping, const TensorView& key,
                      const TensorView& value, const KVCacheView& kv) {
  validate_config(c);
  detail::check_tensor(slot_mapping, {"slot_mapping", DType::i64, kHost, {-1}, false, false});
  const int64_t n = slot_mapping.shape[0];
  detail::check_tensor(key, {"key", DType::bf16, kHost, {n, c.num_kv_heads, c.head_size}});
  detail::check_tensor(value, {"value", DType::bf16, kHost, {n, c.num_kv_heads, c.head_size}});
  detail::validate_kv_cache(c, kv, kHost);
  const int64_t limit = kv.num_blocks * c.block_size;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t slot = *at<const int64_t>(slot_mapping, t);
    require(slot < limit, ErrorCode::out_of_range, "slot_mapping[", t, "]: slot expected < ", limit,
            " (num_blocks * block_size; negative = padding), got ", slot);
  }
}

}  // namespace step5::cpu
