// Translates the public views (TensorView, cache views, StepDesc) and the
// plan's schedule into the kernels' plain Params structs, after the
// boundary validation has run. Each function returns complete params; the
// alignment that the vector loads need is checked here, with clear Errors.
#pragma once

#include "cuda/attention/launch.h"
#include "cuda/common/rows.h"
#include "cuda/indexer/params.h"
#include "cuda/kv_write/params.h"
#include "cuda/select/params.h"
#include "cuda/summaries/params.h"
#include "cuda/tile_attention/params.h"
#include "step5/attention.h"

namespace step5::cuda {

// Row metadata of a step: uniform steps derive it on device; mixed steps
// read `table` (i32 [2, n] in the workspace) when given, else search
// query_start_loc.
RowMeta row_meta(const StepDesc& step, const StepPlan& plan, const int32_t* table);

// `status` (DeviceStatus in the workspace, may be null) is where the
// kernels record faults in device inputs (cuda/common/guard.h).
KvWriteParams kv_write_params(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                              TensorView key, TensorView value, const KVCacheView& kv,
                              uint32_t* status);
// write_kv without a plan: every row of slot_mapping.
KvWriteParams slot_write_params(const LayerConfig& config, TensorView slot_mapping, TensorView key,
                                TensorView value, const KVCacheView& kv, uint32_t* status);
SummaryParams summary_params(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                             TensorView index_key, TensorView index_z, const LayerCache& cache,
                             uint32_t* status);

// Where the indexer writes: scores f32 [rows, G, columns] at element
// strides, and the optional row maxima u32 [rows, G].
struct ScoreTarget {
  float* scores = nullptr;
  int64_t stride_t = 0;
  int64_t stride_g = 0;
  int32_t columns = 0;
  uint32_t* row_max = nullptr;
};

IndexerParams indexer_params(const LayerConfig& config, const LayerSchedule& schedule,
                             const StepDesc& step, const RowMeta& rows, RowRange range,
                             TensorView index_query, TensorView index_weight,
                             const SummaryCacheView& summaries, const ScoreTarget& target,
                             int32_t skip_topk, uint32_t* status);
// What of a forward's cache update a select launch carries: the ring write
// (after the summaries), and, when the plan folds the whole update into it
// (LayerSchedule::cache_update_in_select), the K/V write and the summaries.
struct SelectCacheWork {
  const SummaryParams* ring = nullptr;  // null: no ring write (nor summaries)
  const KvWriteParams* kv = nullptr;    // null: no K/V write here
  bool summarize = false;               // the summaries of `ring` here
};

// `scores` may be absent when no row of `range` has C > K; `columns` of
// them were written. `row_max` (optional) is read and cleared. From
// `schedule`: programmatic_launch, select_short_columns,
// select_staged_columns, select_wide, select_long_rows and
// select_cluster_parts.
SelectParams select_params(const LayerConfig& config, const LayerSchedule& schedule,
                           const RowMeta& rows, RowRange range, TensorView scores, int32_t columns,
                           uint32_t* row_max, TensorView selected, const SelectCacheWork& cache,
                           uint32_t* status);

// Attention of rows `range`: CSA when `selected` ([range rows, G, K]) is
// present, SWA otherwise. Output rows [pad_begin, pad_end) are zeroed by the
// same launch.
struct AttentionTarget {
  TensorView output;
  TensorView selected;  // absent for SWA
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  uint32_t* split_arrivals = nullptr;
  int64_t pad_begin = 0;
  int64_t pad_end = 0;
  bool zero_padding_rows = true;  // rows of padding requests
  // Rows given as a list (the plan's untiled rows of `range`), device i32
  // [list_rows]; null: every row of `range`.
  const int32_t* row_list = nullptr;
  int64_t list_rows = 0;
  // The step's K/V write, done by the attention launch itself
  // (PagedAttentionParams::write_kv); null: written before it.
  const KvWriteParams* kv_write = nullptr;
};
PagedAttentionParams attention_params(const LayerConfig& config, const LayerSchedule& schedule,
                                      const StepDesc& step, const RowMeta& rows, RowRange range,
                                      TensorView query, TensorView gate, const KVCacheView& kv,
                                      const AttentionTarget& target, uint32_t* status);

// Tile attention of `num_tiles` tiles (device i32 [num_tiles, 2], rows in
// `range`, the selection's rows); target's padding and row list unused.
TileAttentionParams tile_attention_params(const LayerConfig& config, const LayerSchedule& schedule,
                                          const StepDesc& step, const RowMeta& rows, RowRange range,
                                          TensorView query, TensorView gate, const KVCacheView& kv,
                                          const AttentionTarget& target, const int32_t* tiles,
                                          int64_t num_tiles, uint32_t* status);

// Boundary checks shared by the single operations and the forwards. All are
// O(1) in the step's size: ids were read once by the plan.
void require_kind(const LayerConfig& config, LayerKind kind, const char* op);
void validate_kv(const LayerConfig& config, const StepPlan& plan, const KVCacheView& kv);
void validate_summary_state(const LayerConfig& config, const StepPlan& plan,
                            const LayerCache& cache);
// Summaries of the regions this step closes, then the ring write.
void run_summaries(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                   TensorView index_key, TensorView index_z, const LayerCache& cache,
                   cudaStream_t stream);

}  // namespace step5::cuda
