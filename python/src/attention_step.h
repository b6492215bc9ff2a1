// One engine step, planned once and run for every layer: the object behind
// step5_attention.AttentionWrapper. plan() reads the host copies of the step
// metadata (no device synchronization), builds the step5::StepPlan and
// copies its row metadata into the workspace; each forward or single
// operation then runs on the caller's arrays with that plan.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "arrays.h"

namespace step5::python {

// A backend and the device its arrays must be on.
struct BackendHandle {
  std::unique_ptr<Backend> backend;
  Placement placement;
};

// Rows [begin, end) of the step; all rows when absent.
using Rows = std::optional<std::pair<int64_t, int64_t>>;

struct StepArrays {
  InArray query_start_loc, seq_lens, block_table, slot_mapping;
  std::optional<InArray> ring_index;
  std::optional<InArray> query_start_loc_cpu, seq_lens_cpu, block_table_cpu, slot_mapping_cpu,
      ring_index_cpu;
};

struct StepOptions {
  int64_t num_output_rows = 0;
  int64_t max_context = 0;
  std::optional<size_t> max_score_bytes;
  bool seq_lens_upper_bound = false;  // seq_lens_cpu holds upper bounds
  TileAttention tile_attention = TileAttention::automatic;
};

// A layer's cache arrays converted once (AttentionWrapper.bind_cache): the
// views every forward would otherwise build from them again, and the arrays
// themselves, kept alive while the binding lives.
struct BoundCache {
  OutArray kv_cache;
  std::optional<OutArray> ring;
  LayerCache cache;
};

class AttentionStep {
 public:
  AttentionStep(std::shared_ptr<BackendHandle> backend, std::vector<LayerConfig> layers);

  void plan(StepArrays arrays, const StepOptions& options, std::optional<OutArray> workspace,
            uintptr_t stream);

  // key/value may be None with ForwardFlags::skip_kv_write, index_key /
  // index_z with skip_summary_update (the library then says so if needed);
  // a CSA ring may be None with skip_summary_update.
  void forward_csa(const LayerConfig& config, const InArray& query,
                   const std::optional<InArray>& key, const std::optional<InArray>& value,
                   const InArray& index_query, const InArray& index_weight,
                   const std::optional<InArray>& index_key, const std::optional<InArray>& index_z,
                   const OutArray& kv_cache, const std::optional<OutArray>& ring,
                   const OutArray& out, const std::optional<InArray>& gate,
                   const std::optional<OutArray>& selected, uint32_t flags, uintptr_t stream);
  void forward_swa(const LayerConfig& config, const InArray& query,
                   const std::optional<InArray>& key, const std::optional<InArray>& value,
                   const OutArray& kv_cache, const OutArray& out,
                   const std::optional<InArray>& gate, uint32_t flags, uintptr_t stream);

  // The cache views of `config` over kv_cache (and ring for CSA), checked as
  // a forward checks them; the forwards below then skip that conversion.
  BoundCache bind_cache(const LayerConfig& config, const OutArray& kv_cache,
                        const std::optional<OutArray>& ring) const;
  void forward_csa_bound(const LayerConfig& config, const InArray& query,
                         const std::optional<InArray>& key, const std::optional<InArray>& value,
                         const InArray& index_query, const InArray& index_weight,
                         const std::optional<InArray>& index_key,
                         const std::optional<InArray>& index_z, const BoundCache& cache,
                         const OutArray& out, const std::optional<InArray>& gate,
                         const std::optional<OutArray>& selected, uint32_t flags, uintptr_t stream);
  void forward_swa_bound(const LayerConfig& config, const InArray& query,
                         const std::optional<InArray>& key, const std::optional<InArray>& value,
                         const BoundCache& cache, const OutArray& out,
                         const std::optional<InArray>& gate, uint32_t flags, uintptr_t stream);

  void write_kv(const LayerConfig& config, const InArray& key, const InArray& value,
                const OutArray& kv_cache, uintptr_t stream);
  void update_summaries(const LayerConfig& config, const InArray& index_key, const InArray& index_z,
                        const OutArray& kv_cache, const OutArray& ring, uintptr_t stream);
  void indexer_scores(const LayerConfig& config, const InArray& index_query,
                      const InArray& index_weight, const OutArray& kv_cache, const OutArray& scores,
                      const Rows& rows, uintptr_t stream);
  void select_regions(const LayerConfig& config, const std::optional<InArray>& scores,
                      const OutArray& selected, const Rows& rows, uintptr_t stream);
  void sparse_attention(const LayerConfig& config, const InArray& query, const InArray& selected,
                        const OutArray& kv_cache, const OutArray& out,
                        const std::optional<InArray>& gate, const Rows& rows, uintptr_t stream);
  void window_attention(const LayerConfig& config, const InArray& query, const OutArray& kv_cache,
                        const OutArray& out, const std::optional<InArray>& gate, uintptr_t stream);

  bool planned() const { return planned_; }
  // Valid after plan(); throws before.
  const StepPlan& step_plan() const;
  const std::vector<LayerConfig>& layers() const { return layers_; }
  const BackendHandle& backend() const { return *backend_; }

 private:
  const Placement& where() const { return backend_->placement; }
  RowRange row_range(const Rows& rows) const;
  void run_csa(const LayerConfig& config, const InArray& query, const std::optional<InArray>& key,
               const std::optional<InArray>& value, const InArray& index_query,
               const InArray& index_weight, const std::optional<InArray>& index_key,
               const std::optional<InArray>& index_z, const LayerCache& cache, const OutArray& out,
               const std::optional<InArray>& gate, const std::optional<OutArray>& selected,
               uint32_t flags, uintptr_t stream);
  void run_swa(const LayerConfig& config, const InArray& query, const std::optional<InArray>& key,
               const std::optional<InArray>& value, const KVCacheView& kv, const OutArray& out,
               const std::optional<InArray>& gate, uint32_t flags, uintptr_t stream);

  std::shared_ptr<BackendHandle> backend_;
  std::vector<LayerConfig> layers_;
  bool planned_ = false;
  StepDesc desc_;
  StepPlan plan_;
  Workspace workspace_;
  // What desc_ and workspace_ point into, kept alive until the next plan.
  StepArrays arrays_;
  std::optional<OutArray> workspace_array_;
  std::vector<unsigned char> host_workspace_;
};

}  // namespace step5::python
