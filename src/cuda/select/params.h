// Region selection (SPEC 4): top-K per (row, group), ties to the lower index.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/device.h"
#include "cuda/common/rows.h"
#include "cuda/heuristics.h"
#include "cuda/kv_write/params.h"
#include "cuda/summaries/params.h"

namespace step5::cuda {

struct SelectParams {
  RowMeta rows;                   // request / position of each step row
  int64_t row_begin = 0;          // first step row of this launch
  int64_t num_rows = 0;           // rows of this launch (grid x)
  const float* scores = nullptr;  // f32 [num_rows, G, >= C] by launch row; may be null when
                                  // no row has C > K (never read then)
  int64_t scores_stride_t = 0;    // elements
  int64_t scores_stride_g = 0;
  int32_t columns = 0;  // score columns written (0 when scores is null); a row
                        // with more closed regions is a fault (beyond the plan);
                        // sizes the kernel's list (select_list_capacity)
  int32_t short_columns = select_short_columns();  // the 128-thread instance's columns limit
                                                   // (LayerSchedule::select_short_columns)
  int32_t staged_columns = 0;  // launches past short_columns up to this many columns take the
                               // staged instance (LayerSchedule::select_staged_columns)
  bool wide = false;  // longer rows take select_wide_threads() CTAs (LayerSchedule::select_wide)
  bool long_rows = false;             // launches past select_long_columns() take the long-row
                                      // instances (LayerSchedule::select_long_rows)
  int32_t cluster_parts = 1;          // CTAs (one cluster) per selection past the short columns;
                                      // 1 = one CTA each (LayerSchedule::select_cluster_parts)
  const uint32_t* row_max = nullptr;  // u32 [num_rows, G]: the best order key of each row's
                                      // scores (score_key); null = found by one more pass
  int32_t* selected = nullptr;        // i32 [num_rows, G, K] by launch row; not null
  int64_t selected_stride_t = 0;      // elements
  int64_t selected_stride_g = 0;
  int32_t num_groups = 0;             // G (grid y)
  int32_t topk = 0;                   // K
  uint32_t* clear_row_max = nullptr;  // u32 [num_rows, G]: zeroed once read (the next
                                      // indexer accumulates into it); may be null
  // A forward's ring write rides on this launch (one launch fewer): the
  // CTA of (row, group 0) stores the row in its request's ring when the
  // ring keeps it. It runs after the summaries, which read the old ring.
  bool write_ring = false;
  SummaryParams ring;  // used when write_ring or summarize
  // The forward's cache update too, when the plan lets it ride here
  // (LayerSchedule::cache_update_in_select: every request has at most one
  // query row, so no row of the step scores a region the step closes, and
  // a summary reads ring slots the ring write does not touch): the CTA of
  // (row t, group g) writes t's K/V of head g; CTAs past num_rows (grid x)
  // summarize the regions the requests close, one warp each.
  bool write_kv = false;
  bool kv_fp8 = false;  // kv_dtype is fp8_e4m3 (else bf16)
  KvWriteParams kv;     // used when write_kv
  bool summarize = false;
  bool summary_fp8 = false;  // summary_dtype is fp8_e4m3 (else bf16)
  // Launched with programmatic stream serialization (the kernel waits for
  // the previous one first either way).
  bool programmatic_launch = false;
  DeviceGuard guard;  // status only
};

void launch_select(const SelectParams& params, cudaStream_t stream);

// Sets device.select_active_clusters: how many clusters of 2, 4 and 8 CTAs
// of the cluster selection kernel the current device runs at once (one
// occupancy query per size), none where the device (compute capability
// below 9.0) or the loaded image (compute_80 PTX, whose kernel traps) has
// no clusters or the kernel's list does not fit.
void set_select_active_clusters(DeviceInfo& device);

}  // namespace step5::cuda
