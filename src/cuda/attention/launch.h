// Paged attention over 8-token pages (SPEC 5): one kernel family for CSA
// prefill, decode and verify rows (selected regions + the row's own region)
// and SWA windows.
//
// Design. A row's keys are a list of 8-token pages: a CSA row's selected
// regions (-1 entries skipped) then its current region 8c..p; an SWA row's
// pages floor(lo/8)..floor(p/8) with lo = max(0, p-W+1), masked per
// position. One CTA handles one (row, KV group, split): the H/G query heads
// of the group form the N side of mma.sync m16n8k16 tiles (one or two
// tiles of 8) and the page's keys the M side (S^T = K Q^T, O^T += V^T P^T,
// row_fragments.cuh), so every K/V page is read once for all heads of its
// group and no MMA row is padding at H/G = 8. Each warp of the
// CTA streams its own pairs of pages (16 keys) into shared memory with
// cp.async (2 stages deep for bf16, 4 for fp8), and keeps its own online
// softmax (m, l, acc) in fp32 registers; the warps merge in shared memory at
// the end. Small batches split a row's page list across CTAs (flash-decoding
// split-KV) so a decode step still fills the SMs: each split writes its fp32
// partial (m, l, acc) to scratch and the last split of a (row, group) to
// finish merges them, applies the sigmoid gate and rounds once to bf16
// (epilogue.cuh). With one split no scratch is used.
//
// Numerics: logits = scale * q.k in fp32 (tensor-core fp32 accumulation of
// exact products), online softmax in fp32, probabilities rounded to bf16
// for the P.V product (allowed by SPEC 8), fp32 accumulation, one final
// rounding to bf16. fp8 KV pages are converted in registers, exactly
// (fragments.cuh, row_fragments.cuh); k_scale / v_scale are applied in fp32 (k_scale folded
// into the logit scale, v_scale into the final 1/l).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/common/guard.h"
#include "cuda/common/rows.h"
#include "cuda/kv_write/params.h"
#include "step5/config.h"
#include "step5/tensor.h"

namespace step5::cuda {

struct PagedAttentionParams {
  // Step rows [row_begin, row_begin + num_rows) are computed, or with a row
  // list, launch row i is step row row_list[i] (selection row row_list[i] -
  // row_begin).
  int64_t row_begin = 0;
  int64_t num_rows = 0;
  const int32_t* row_list = nullptr;  // i32 [num_rows] device; may be null (all rows); a -1
                                      // entry is a row this launch skips (the tile kernel's)

  // Row -> (request, position); see cuda/common/rows.h. All device pointers.
  RowMeta rows;
  const int32_t* block_table = nullptr;  // i32 [R, block_table_stride] device; not null
  int64_t block_table_stride = 0;        // elements between requests

  // Page source. CSA: `selected` not null; SWA: `selected` null and window > 0.
  const int32_t* selected = nullptr;  // i32 [num_rows, G, topk] device, indexed by
                                      // (t - row_begin); -1 entries skipped; may be null (SWA)
  int64_t selected_row_stride = 0;    // elements between rows
  int64_t selected_group_stride = 0;  // elements between groups (innermost contiguous)
  int32_t topk = 0;                   // K, entries per (row, group)
  int32_t window = 0;                 // W (SWA only), keys per row including itself

  // Activations, indexed by step row t. Strides are in elements.
  const uint16_t* query = nullptr;  // bf16 [n, H, D] device; not null; head dim contiguous
  int64_t query_row_stride = 0;
  int64_t query_head_stride = 0;
  const uint16_t* gate = nullptr;  // bf16 [n, H] device; null = no gate; heads contiguous
  int64_t gate_row_stride = 0;
  uint16_t* output = nullptr;  // bf16 [num_output_rows, H, D] device; not null
  int64_t output_row_stride = 0;
  int64_t output_head_stride = 0;

  // KV cache: token o of head g in block b holds K (D values) then V (D
  // values) of kv_dtype at kv + b*block_stride + g*head_stride + o*token_stride.
  // Base and strides must be multiples of 16 bytes (16-byte cp.async).
  const void* kv = nullptr;      // device; not null
  DType kv_dtype = DType::bf16;  // bf16 or fp8_e4m3
  int64_t kv_block_stride = 0;   // bytes
  int64_t kv_head_stride = 0;    // bytes
  int64_t kv_token_stride = 0;   // bytes
  float k_scale = 1.0f;          // fp8 read = stored * scale; ignored for bf16
  float v_scale = 1.0f;

  int32_t num_heads = 0;     // H
  int32_t num_kv_heads = 0;  // G
  int32_t head_size = 0;     // D
  int32_t block_size = 0;    // B, a multiple of 8
  int32_t block_shift = -1;  // log2(B) when B is a power of two, else -1: the
                             // copy loop then shifts instead of dividing
  float softmax_scale = 0;   // the resolved scale (LayerConfig::softmax_scale())

  // Split-KV: the plan's split count (LayerSchedule::attention_splits) and
  // the partials' scratch, at least paged_attention_scratch_bytes(config,
  // num_rows, num_splits) bytes, 256-byte aligned, device; may be null when
  // that is 0.
  int32_t num_splits = 1;
  // cp.async stages per warp: the plan's LayerSchedule::attention_stages
  // (paged_attention_stages); 0 = the default depth.
  int32_t stages = 0;
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  // u32 [num_rows, G]: arrivals of each (row, group)'s splits; zero on
  // entry, left zero; used when num_splits > 1 (paged_attention_counters_bytes).
  uint32_t* split_arrivals = nullptr;

  // Output rows [pad_row_begin, pad_row_end) are zeroed by the same launch
  // (CUDA-graph padding rows n..num_output_rows-1); empty range = none.
  int64_t pad_row_begin = 0;
  int64_t pad_row_end = 0;

  // Device guards: num_blocks of the KV cache and the block-table width.
  // A row whose position is negative or past its block-table row, or whose
  // keys fall in a block outside the cache, gets NaN output (fault recorded).
  DeviceGuard guard;
  // Rows of padding requests (rows.h) come out as zeros; false leaves them.
  bool zero_padding_rows = true;
  // Launched with programmatic stream serialization (the kernel waits for
  // the previous one first either way).
  bool programmatic_launch = false;
  // SWA: the step's K/V rows written by this launch instead of a kv_write
  // launch before it (LayerSchedule::kv_write_in_attention): the CTA of
  // (row t, group g) whose split holds t's last page, the one with t's own
  // position, stores t's key and value of group g before it copies any
  // page. Sound only when no other row reads a slot this step writes (one
  // query row per request). kv_write.num_tokens must cover the launch's rows.
  bool write_kv = false;
  KvWriteParams kv_write;  // used when write_kv
};

// Computes params.num_rows rows of attention into params.output (and zeroes
// the padding rows). Throws Error(unsupported) for D or H/G outside the
// compiled set (D in {64, 128, 192}, H/G in 1..16), Error(invalid_argument)
// for inconsistent params or too little scratch. Asynchronous on `stream`.
void launch_paged_attention(const PagedAttentionParams& params, cudaStream_t stream);

// The split count for `rows` rows of a layer on a GPU of `sm_count` SMs,
// and the scratch bytes its partials need (0 when no split is used). Both
// depend only on shapes, so a plan sizes them before seeing the contexts.
// Throws ErrorCode::unsupported, naming the supported values, when no
// compiled kernel serves the layer (head size, heads per group); the plan
// calls it so a forward never fails half-way.
void require_paged_attention_supports(const LayerConfig& config);

// cp.async stages per warp for a layer on a GPU whose opt-in shared memory
// per block is `max_smem` bytes: the default depth when its tile fits, else
// the compact depth (heuristics.h). Throws Error(unsupported) when neither
// fits, naming the bytes needed.
int paged_attention_stages(const LayerConfig& config, size_t max_smem);

int paged_attention_splits(const LayerConfig& config, int64_t rows, int sm_count);
size_t paged_attention_scratch_bytes(const LayerConfig& config, int64_t rows, int splits);
size_t paged_attention_counters_bytes(const LayerConfig& config, int64_t rows, int splits);
// The most scratch and counter bytes of any row count in 1..max_rows (for
// the static workspace bound).
struct PagedAttentionBytes {
  size_t scratch = 0;
  size_t counters = 0;
};
PagedAttentionBytes paged_attention_max_bytes(const LayerConfig& config, int64_t max_rows,
                                              int sm_count);

// Zeroes output rows [row_begin, row_end) of a bf16 [*, H, D] tensor (strides
// in elements); for callers that have no attention launch to fold it into.
void launch_zero_rows(uint16_t* output, int64_t row_stride, int64_t head_stride, int32_t num_heads,
                      int32_t head_size, int64_t row_begin, int64_t row_end, cudaStream_t stream);

}  // namespace step5::cuda
