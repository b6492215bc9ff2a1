// Boundary checks of the cpu backend's operations, on top of the shared ones
// of core/validate.h: the step's views (not host copies: the kernels read the
// views), cache sizes against the ids the plan read, and a caller's
// selection contents.
#pragma once

#include "cpu/step_rows.h"
#include "step5/attention.h"

namespace step5::cpu {

// The step with its host_* copies dropped: the kernels read the views, so
// the planner and the checks read them too. Upper bounds of seq_lens stay
// (seq_lens_upper_bound): the planner needs them, the kernels the views.
StepDesc views_only(const StepDesc& step);

void check_step(const LayerConfig& c, const StepDesc& step, const StepPlan& plan, LayerKind kind,
                const char* op);
void check_kv(const LayerConfig& c, const StepPlan& plan, const KVCacheView& kv);
void check_summaries(const LayerConfig& c, const StepPlan& plan, const SummaryCacheView& summaries);
void check_ring(const LayerConfig& c, const StepPlan& plan, const RingView& ring);

// A caller's selection must name distinct closed regions, or attention
// would read past the row's history (and past its scratch).
void check_selection_contents(const LayerConfig& c, const StepRows& rows, RowRange range,
                              const TensorView& selected);

// write_kv without a plan: slot_mapping i64 [n] on the host, key/value
// [>= n, G, D], the cache; every slot < num_blocks * B (negative = padding).
void check_slot_write(const LayerConfig& c, const TensorView& slot_mapping, const TensorView& key,
                      const TensorView& value, const KVCacheView& kv);

}  // namespace step5::cpu
