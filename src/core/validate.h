// Boundary validation shared by every backend. Each function throws
// step5::Error naming the argument, what was expected and what was given.
#pragma once

#include "step5/attention.h"

namespace step5::detail {

// Host-visible copies of the step metadata: the explicit host_* pointer, or
// the view itself when it lives in host memory; null when neither.
const int32_t* host_query_start_loc(const StepDesc& step);
const int32_t* host_seq_lens(const StepDesc& step);
const int32_t* host_block_table(const StepDesc& step);
const int64_t* host_slot_mapping(const StepDesc& step);
const int32_t* host_ring_index(const StepDesc& step);

// The step's views against the plan, the layer and the backend's device.
void validate_step(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                   Device device);

// Cache views against the layer (dtype, strides large enough, device).
void validate_kv_cache(const LayerConfig& config, const KVCacheView& kv, Device device);
void validate_summary_cache(const LayerConfig& config, const SummaryCacheView& summaries,
                            Device device);
void validate_ring(const LayerConfig& config, const RingView& ring, Device device);
// O(1): the largest block id and slot the plan read from the step's host
// copies against a cache of `num_blocks` blocks, and the largest ring
// entry against `num_entries`. Nothing to check where the host saw no copy.
void validate_block_ids(const LayerConfig& config, const StepPlan& plan, int64_t num_blocks);
void validate_ring_ids(const StepPlan& plan, int64_t num_entries);

// Per-operation tensors.
void validate_kv_inputs(const LayerConfig& config, const StepPlan& plan, const TensorView& key,
                        const TensorView& value, Device device);
void validate_index_rows(const LayerConfig& config, const StepPlan& plan,
                         const TensorView& index_key, const TensorView& index_z, Device device);
void validate_index_query(const LayerConfig& config, const StepPlan& plan,
                          const TensorView& index_query, const TensorView& index_weight,
                          Device device);
void validate_query(const LayerConfig& config, const StepPlan& plan, const TensorView& query,
                    const TensorView& gate, Device device);
void validate_rows(const StepPlan& plan, RowRange rows);
void validate_scores(const LayerConfig& config, const StepPlan& plan, RowRange rows,
                     const TensorView& scores, bool optional, Device device);
void validate_selected(const LayerConfig& config, RowRange rows, const TensorView& selected,
                       Device device);
void validate_output(const LayerConfig& config, const StepPlan& plan, const TensorView& output,
                     Device device);
void validate_workspace(const StepPlan& plan, const Workspace& workspace);

}  // namespace step5::detail
