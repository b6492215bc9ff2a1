// The cpu kernels behind the Backend operations. They run on arguments the
// backend has already validated (src/cpu/cpu_backend.cpp) and never throw.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/parallel.h"
#include "cpu/step_rows.h"
#include "step5/attention.h"

namespace step5::cpu {

// A validated step as every kernel reads it: positions and requests of rows
// from `rows` (step_rows.h), block ids, slots and ring indices from the views.
struct StepArgs {
  const LayerConfig& config;
  const StepDesc& step;
  const StepPlan& plan;
  const StepRows& rows;
  ThreadPool& pool;
  bool zero_padding_rows = true;  // attention zeroes padding rows (else leaves them)
};

// Per-thread scratch: `threads` slabs of `slab_bytes` each, carved from the
// workspace's scratch region in forward and from a temporary buffer in the
// single operations (which get no workspace).
struct Scratch {
  std::byte* base = nullptr;
  size_t slab_bytes = 0;
  std::byte* slab(int thread) const { return base + static_cast<size_t>(thread) * slab_bytes; }
};

// Hands out 64-byte aligned pieces of one slab. With a null base it only
// counts, so each kernel's carve() both sizes and lays out its scratch.
class SlabCursor {
 public:
  explicit SlabCursor(std::byte* base) : base_(base) {}
  template <class T>
  T* take(size_t count) {
    T* piece = base_ != nullptr ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += (count * sizeof(T) + 63) / 64 * 64;
    return piece;
  }
  size_t used() const { return used_; }

 private:
  std::byte* base_;
  size_t used_ = 0;
};

// Bytes of one thread's slab for every kernel of every layer of `plan`.
size_t scratch_slab_bytes(const StepPlan& plan);
// Per-kernel slab sizes (the maximum over them is the slab).
size_t indexer_slab_bytes(const LayerConfig& config);
size_t select_slab_bytes(int64_t max_closed);
size_t attention_slab_bytes(const LayerConfig& config, int64_t max_keys);

namespace kernel {

// Rows of padding requests and rows with a negative slot are skipped.
void write_kv(const StepArgs& a, const TensorView& key, const TensorView& value,
              const KVCacheView& kv);
// write_kv without a step: row t to slot_mapping[t], negative slots skipped.
void write_kv_slots(const LayerConfig& config, ThreadPool& pool, const TensorView& slot_mapping,
                    const TensorView& key, const TensorView& value, const KVCacheView& kv);

// Serial: a step has at most n/8 regions to close, a small cost next to
// attention, and a fixed order makes reuse of a ring entry deterministic.
void update_summaries(const StepArgs& a, const TensorView& index_key, const TensorView& index_z,
                      const SummaryCacheView& summaries, const RingView& ring);

// `only_over_topk` skips rows with C <= K (forward: their scores are unread).
void indexer_scores(const StepArgs& a, const Scratch& scratch, RowRange rows,
                    const TensorView& index_query, const TensorView& index_weight,
                    const SummaryCacheView& summaries, const TensorView& scores,
                    bool only_over_topk);

void select_regions(const StepArgs& a, const Scratch& scratch, RowRange rows,
                    const TensorView& scores, const TensorView& selected);

void sparse_attention(const StepArgs& a, const Scratch& scratch, RowRange rows,
                      const TensorView& query, const TensorView& selected, const TensorView& gate,
                      const KVCacheView& kv, const TensorView& output);

void window_attention(const StepArgs& a, const Scratch& scratch, const TensorView& query,
                      const TensorView& gate, const KVCacheView& kv, const TensorView& output);

// Zeroes output rows [begin, end) (CUDA-graph padding).
void zero_rows(const LayerConfig& config, const TensorView& output, int64_t begin, int64_t end);

}  // namespace kernel
}  // namespace step5::cpu
