#include "cuda/views.h"

#include <algorithm>
#include <cstdint>

#include "core/check.h"
#include "core/validate.h"

namespace step5::cuda {

namespace {

// 16-byte vector loads and stores need 16-byte aligned rows.
void require_vectors(const void* data, std::initializer_list<int64_t> byte_strides,
                     const char* what) {
  bool ok = reinterpret_cast<uintptr_t>(data) % 16 == 0;
  for (int64_t stride : byte_strides) ok = ok && stride % 16 == 0;
  detail::require(ok, ErrorCode::unsupported, "cuda backend: ", what,
                  " expected 16-byte aligned data and outer strides (vector access), got "
                  "address ",
                  data);
}

void require_rows(const TensorView& v, const char* what) {
  const auto elem = static_cast<int64_t>(dtype_size(v.dtype));
  bool ok = reinterpret_cast<uintptr_t>(v.data) % 16 == 0;
  for (int d = 0; d + 1 < v.rank; ++d)
    ok = ok && (v.stride[static_cast<size_t>(d)] * elem) % 16 == 0;
  if (!ok) {
    detail::fail(ErrorCode::unsupported,
                 detail::concat("cuda backend: ", what,
                                " expected 16-byte aligned data and outer strides (vector access), "
                                "got address ",
                                v.data, " shape ", detail::shape_string(v)));
  }
}

template <class T>
T* ptr(const TensorView& v) {
  return static_cast<T*>(v.data);
}

// log2(x) for a power of two x > 0, else -1 (kernels then divide).
int32_t log2_if_power_of_two(int32_t x) {
  return x > 0 && (x & (x - 1)) == 0 ? __builtin_ctz(static_cast<uint32_t>(x)) : -1;
}

int32_t block_table_cols(const StepDesc& step) {
  return static_cast<int32_t>(step.block_table.shape[1]);
}

}  // namespace

RowMeta row_meta(const StepDesc& step, const StepPlan& plan, const int32_t* table) {
  RowMeta m;
  m.query_start_loc = ptr<const int32_t>(step.query_start_loc);
  m.seq_lens = ptr<const int32_t>(step.seq_lens);
  m.num_requests = plan.num_requests;
  if (plan.kind == StepKind::uniform) {
    m.query_len = plan.query_len;
  } else if (table != nullptr) {
    m.row_request = table;
    // Planned positions are bounds when the plan read upper bounds.
    m.row_position = plan.seq_lens_upper_bound ? nullptr : table + plan.num_tokens;
  }
  return m;
}

KvWriteParams kv_write_params(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                              TensorView key, TensorView value, const KVCacheView& kv,
                              uint32_t* status) {
  KvWriteParams p = slot_write_params(config, step.slot_mapping, key, value, kv, status);
  p.num_tokens = plan.num_tokens;
  // Uniform steps replayed from a graph may have fewer live rows.
  if (plan.kind == StepKind::uniform) {
    p.live_rows = ptr<const int32_t>(step.query_start_loc) + plan.num_requests;
  }
  return p;
}

KvWriteParams slot_write_params(const LayerConfig& config, TensorView slot_mapping, TensorView key,
                                TensorView value, const KVCacheView& kv, uint32_t* status) {
  require_rows(key, "key");
  require_rows(value, "value");
  require_vectors(kv.data, {kv.block_stride, kv.head_stride, kv.token_stride}, "kv cache");
  KvWriteParams p;
  p.key = ptr<const uint16_t>(key);
  p.value = ptr<const uint16_t>(value);
  p.key_stride_t = key.stride[0];
  p.key_stride_g = key.stride[1];
  p.value_stride_t = value.stride[0];
  p.value_stride_g = value.stride[1];
  p.slot_mapping = ptr<const int64_t>(slot_mapping);
  p.cache = kv.data;
  p.block_stride = kv.block_stride;
  p.head_stride = kv.head_stride;
  p.token_stride = kv.token_stride;
  p.num_tokens = slot_mapping.shape[0];
  p.num_heads = config.num_kv_heads;
  p.head_size = config.head_size;
  p.block_size = config.block_size;
  p.block_shift = log2_if_power_of_two(config.block_size);
  p.k_scale = config.k_scale;
  p.v_scale = config.v_scale;
  p.guard = {kv.num_blocks, 0, status};
  return p;
}

SummaryParams summary_params(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                             TensorView index_key, TensorView index_z, const LayerCache& cache,
                             uint32_t* status) {
  require_rows(index_key, "index_key");
  require_vectors(cache.summaries.data,
                  {cache.summaries.block_stride, cache.summaries.region_stride}, "summary cache");
  require_vectors(cache.ring.data,
                  {cache.ring.entry_stride, static_cast<int64_t>(ring_row_bytes(config))}, "ring");
  SummaryParams p;
  p.index_key = ptr<const uint16_t>(index_key);
  p.index_key_stride = index_key.stride[0];
  p.index_z = ptr<const float>(index_z);
  p.index_z_stride = index_z.stride[0];
  p.query_start_loc = ptr<const int32_t>(step.query_start_loc);
  p.seq_lens = ptr<const int32_t>(step.seq_lens);
  p.block_table = ptr<const int32_t>(step.block_table);
  p.block_table_stride = step.block_table.stride[0];
  p.ring_index = ptr<const int32_t>(step.ring_index);
  p.summaries = cache.summaries.data;
  p.summary_block_stride = cache.summaries.block_stride;
  p.summary_region_stride = cache.summaries.region_stride;
  p.ring = cache.ring.data;
  p.ring_entry_stride = cache.ring.entry_stride;
  p.ring_row_bytes = static_cast<int64_t>(ring_row_bytes(config));
  p.ring_capacity = config.ring_capacity();
  p.num_requests = plan.num_requests;
  p.index_dim = config.index_dim;
  p.block_size = config.block_size;
  // Region j closes when 8j+7 is among [start, seq_len): j in
  // [start/8, seq_len/8). Uniform steps take the bound ceil(q/8) that holds
  // for every seq_lens, so a captured graph replays with new lengths.
  p.max_closing = plan.kind == StepKind::uniform ? (plan.query_len + 7) / 8 : plan.max_closing;
  p.num_tokens = step.num_tokens;
  p.num_ring_entries = cache.ring.num_entries;
  p.guard = {cache.summaries.num_blocks, block_table_cols(step), status};
  return p;
}

IndexerParams indexer_params(const LayerConfig& config, const LayerSchedule& schedule,
                             const StepDesc& step, const RowMeta& rows, RowRange range,
                             TensorView index_query, TensorView index_weight,
                             const SummaryCacheView& summaries, const ScoreTarget& target,
                             int32_t skip_topk, uint32_t* status) {
  require_rows(index_query, "index_query");
  require_vectors(summaries.data, {summaries.block_stride, summaries.region_stride},
                  "summary cache");
  IndexerParams p;
  p.rows = rows;
  p.row_begin = range.begin;
  p.num_rows = range.size();
  p.index_query = ptr<const uint16_t>(index_query);
  p.query_stride_t = index_query.stride[0];
  p.query_stride_g = index_query.stride[1];
  p.query_stride_h = index_query.stride[2];
  p.index_weight = ptr<const float>(index_weight);
  p.weight_stride_t = index_weight.stride[0];
  p.weight_stride_g = index_weight.stride[1];
  p.block_table = ptr<const int32_t>(step.block_table);
  p.block_table_stride = step.block_table.stride[0];
  p.summaries = summaries.data;
  p.summary_block_stride = summaries.block_stride;
  p.summary_region_stride = summaries.region_stride;
  p.scores = target.scores;
  p.scores_stride_t = target.stride_t;
  p.scores_stride_g = target.stride_g;
  p.row_max = target.row_max;
  p.columns = target.columns;
  p.num_groups = config.num_kv_heads;
  p.index_heads = config.index_heads;
  p.index_dim = config.index_dim;
  p.block_size = config.block_size;
  p.block_shift = log2_if_power_of_two(config.block_size / 8);
  p.skip_topk = skip_topk;
  // Forwards never read past C; the single operation writes the tail itself.
  p.fill_tail = false;
  p.rows_per_unit = schedule.indexer_rows_per_unit;
  p.tile_n = schedule.indexer_tile_n;
  p.ctas = schedule.indexer_ctas;
  p.consumers = schedule.indexer_consumers;
  p.stages = schedule.indexer_stages;
  p.programmatic_launch = schedule.programmatic_launch;
  p.guard = {summaries.num_blocks, block_table_cols(step), status};
  return p;
}

PagedAttentionParams attention_params(const LayerConfig& config, const LayerSchedule& schedule,
                                      const StepDesc& step, const RowMeta& rows, RowRange range,
                                      TensorView query, TensorView gate, const KVCacheView& kv,
                                      const AttentionTarget& target, uint32_t* status) {
  PagedAttentionParams p;
  p.row_begin = range.begin;
  p.num_rows = range.size();
  p.rows = rows;
  p.block_table = ptr<const int32_t>(step.block_table);
  p.block_table_stride = step.block_table.stride[0];
  if (target.selected.present()) {
    p.selected = ptr<const int32_t>(target.selected);
    p.selected_row_stride = target.selected.stride[0];
    p.selected_group_stride = target.selected.stride[1];
  }
  p.topk = config.kind == LayerKind::csa ? config.topk : 0;
  p.window = config.kind == LayerKind::swa ? config.window : 0;
  p.query = ptr<const uint16_t>(query);
  p.query_row_stride = query.stride[0];
  p.query_head_stride = query.stride[1];
  p.gate = gate.present() ? ptr<const uint16_t>(gate) : nullptr;
  p.gate_row_stride = gate.present() ? gate.stride[0] : 0;
  p.output = ptr<uint16_t>(target.output);
  p.output_row_stride = target.output.stride[0];
  p.output_head_stride = target.output.stride[1];
  p.kv = kv.data;
  p.kv_dtype = kv.dtype;
  p.kv_block_stride = kv.block_stride;
  p.kv_head_stride = kv.head_stride;
  p.kv_token_stride = kv.token_stride;
  p.k_scale = config.k_scale;
  p.v_scale = config.v_scale;
  p.num_heads = config.num_heads;
  p.num_kv_heads = config.num_kv_heads;
  p.head_size = config.head_size;
  p.block_size = config.block_size;
  p.block_shift = log2_if_power_of_two(config.block_size);
  p.softmax_scale = config.softmax_scale();
  p.num_splits = schedule.attention_splits;
  p.stages = schedule.attention_stages;
  p.scratch = target.scratch;
  p.scratch_bytes = target.scratch_bytes;
  p.split_arrivals = target.split_arrivals;
  p.pad_row_begin = target.pad_begin;
  p.pad_row_end = target.pad_end;
  p.guard = {kv.num_blocks, block_table_cols(step), status};
  p.zero_padding_rows = target.zero_padding_rows;
  p.programmatic_launch = schedule.programmatic_launch;
  if (target.row_list != nullptr) {
    p.row_list = target.row_list;
    p.num_rows = target.list_rows;
  }
  if (target.kv_write != nullptr) {
    p.write_kv = true;
    p.kv_write = *target.kv_write;
  }
  return p;
}

TileAttentionParams tile_attention_params(const LayerConfig& config, const LayerSchedule& schedule,
                                          const StepDesc& step, const RowMeta& rows, RowRange range,
                                          TensorView query, TensorView gate, const KVCacheView& kv,
                                          const AttentionTarget& target, const int32_t* tiles,
                                          int64_t num_tiles, uint32_t* status) {
  AttentionTarget rows_only = target;
  rows_only.pad_begin = rows_only.pad_end = 0;
  rows_only.row_list = nullptr;
  TileAttentionParams p;
  p.attn = attention_params(config, LayerSchedule{}, step, rows, range, query, gate, kv, rows_only,
                            status);
  p.tiles = tiles;
  p.num_tiles = static_cast<int32_t>(num_tiles);
  p.wgmma = schedule.tile_wgmma;
  p.ctas = schedule.tile_ctas;
  return p;
}

SelectParams select_params(const LayerConfig& config, const LayerSchedule& schedule,
                           const RowMeta& rows, RowRange range, TensorView scores, int32_t columns,
                           uint32_t* row_max, TensorView selected, const SelectCacheWork& cache,
                           uint32_t* status) {
  SelectParams p;
  p.rows = rows;
  p.row_begin = range.begin;
  p.num_rows = range.size();
  p.scores = ptr<const float>(scores);
  p.scores_stride_t = scores.present() ? scores.stride[0] : 0;
  p.scores_stride_g = scores.present() ? scores.stride[1] : 0;
  p.row_max = row_max;
  p.clear_row_max = row_max;
  p.write_ring = cache.ring != nullptr;
  if (cache.ring != nullptr) p.ring = *cache.ring;
  p.summarize = cache.ring != nullptr && cache.summarize;
  p.summary_fp8 = config.summary_dtype == DType::fp8_e4m3;
  p.write_kv = cache.kv != nullptr;
  if (cache.kv != nullptr) p.kv = *cache.kv;
  p.kv_fp8 = config.kv_dtype == DType::fp8_e4m3;
  p.programmatic_launch = schedule.programmatic_launch;
  p.short_columns = schedule.select_short_columns;
  p.staged_columns = schedule.select_staged_columns;
  p.wide = schedule.select_wide;
  p.long_rows = schedule.select_long_rows;
  p.cluster_parts = schedule.select_cluster_parts;
  p.selected = ptr<int32_t>(selected);
  p.selected_stride_t = selected.stride[0];
  p.selected_stride_g = selected.stride[1];
  p.num_groups = config.num_kv_heads;
  p.topk = config.topk;
  p.columns = scores.present() ? columns : 0;
  p.guard.status = status;
  return p;
}

void require_kind(const LayerConfig& config, LayerKind kind, const char* op) {
  detail::require(config.kind == kind, ErrorCode::invalid_argument, op, ": config.kind expected ",
                  layer_kind_name(kind), ", got ", layer_kind_name(config.kind));
}

void validate_kv(const LayerConfig& config, const StepPlan& plan, const KVCacheView& kv) {
  detail::validate_kv_cache(config, kv, Device::cuda);
  detail::validate_block_ids(config, plan, kv.num_blocks);
}

void validate_summary_state(const LayerConfig& config, const StepPlan& plan,
                            const LayerCache& cache) {
  detail::validate_summary_cache(config, cache.summaries, Device::cuda);
  detail::validate_ring(config, cache.ring, Device::cuda);
  detail::validate_block_ids(config, plan, cache.summaries.num_blocks);
  detail::validate_ring_ids(plan, cache.ring.num_entries);
}

void run_summaries(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                   TensorView index_key, TensorView index_z, const LayerCache& cache,
                   cudaStream_t stream) {
  if (plan.num_tokens == 0) return;
  const SummaryParams p = summary_params(config, step, plan, index_key, index_z, cache, nullptr);
  launch_summaries(p, config.summary_dtype, stream);
  launch_ring_write(p, stream);
}

}  // namespace step5::cuda
