// Translates the public views (TensorView, cache views, StepDesc) into the
// kernels' plain Params structs, after the boundary validation has run.
// Alignment that the vector loads need is checked here, with clear Errors.
#pragma once

#include "cuda/attention/launch.h"
#include "cuda/common/rows.h"
#include "cuda/indexer/params.h"
#include "cuda/kv_write/params.h"
#include "cuda/select/params.h"
#include "cuda/summaries/params.h"
#include "step5/attention.h"

namespace step5::cuda {

// Row metadata of a step: uniform steps derive it on device; mixed steps
// read `table` (i32 [2, n] in the workspace) when given, else search
// query_start_loc.
RowMeta row_meta(const StepDesc& step, const StepPlan& plan, const int32_t* table);

KvWriteParams kv_write_params(const LayerConfig& config, const StepDesc& step, TensorView key,
                              TensorView value, const KVCacheView& kv);
SummaryParams summary_params(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                             TensorView index_key, TensorView index_z, const LayerCache& cache);
IndexerParams indexer_params(const LayerConfig& config, const StepDesc& step, const RowMeta& rows,
                             RowRange range, TensorView index_query, TensorView index_weight,
                             const SummaryCacheView& summaries);
SelectParams select_params(const LayerConfig& config, const RowMeta& rows, RowRange range,
                           TensorView scores, TensorView selected);
// Points the attention at a [rows, G, K] selection.
void set_selected(PagedAttentionParams& p, TensorView selected);
PagedAttentionParams attention_params(const LayerConfig& config, const StepDesc& step,
                                      const RowMeta& rows, RowRange range, TensorView query,
                                      TensorView gate, const KVCacheView& kv, TensorView output);

// Boundary checks shared by the single operations and the forwards.
void require_kind(const LayerConfig& config, LayerKind kind, const char* op);
void validate_summary_update(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                             TensorView index_key, TensorView index_z, const LayerCache& cache);
// Summaries of the regions this step closes, then the ring write.
void run_summaries(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                   TensorView index_key, TensorView index_z, const LayerCache& cache,
                   cudaStream_t stream);

}  // namespace step5::cuda
