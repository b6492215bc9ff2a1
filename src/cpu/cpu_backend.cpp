// The cpu Backend: boundary validation of every operation, then the kernels
// of src/cpu/kernels.h. Forwards validate everything before writing anything.
#include "cpu/cpu_backend.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/plan.h"
#include "core/validate.h"
#include "cpu/cache_access.h"
#include "cpu/checks.h"
#include "cpu/kernels.h"

namespace step5::cpu {

namespace {

constexpr Device kHost = Device::host;
using detail::require;

// A dense view of `shape` at byte `offset` of the workspace.
TensorView workspace_view(const Workspace& ws, size_t offset, DType dtype,
                          std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(static_cast<std::byte*>(ws.data) + offset, dtype, shape);
}

// Rows [rows) of a view, as a view of rows.size() rows.
TensorView row_slice(const TensorView& v, RowRange rows) {
  TensorView slice = v;
  slice.data = static_cast<std::byte*>(v.data) +
               rows.begin * v.stride[0] * static_cast<int64_t>(dtype_size(v.dtype));
  slice.shape[0] = rows.size();
  return slice;
}

int resolve_threads(const BackendOptions& options) {
  require(options.num_threads >= 0, ErrorCode::invalid_argument,
          "BackendOptions.num_threads: expected >= 0 (0 = hardware concurrency), got ",
          options.num_threads);
  if (options.num_threads > 0) return options.num_threads;
  return std::max(1u, std::thread::hardware_concurrency());
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : pool_(threads) {}

  BackendKind kind() const override { return BackendKind::cpu; }
  Device device() const override { return kHost; }

  StepPlan plan(const StepDesc& step, const std::vector<LayerConfig>& layers,
                const PlanOptions& options) const override {
    // The kernels read the views, so the plan reads (and checks) the views
    // too, not host copies that could differ from them.
    return detail::build_plan(views_only(step), layers, options, /*sm_count=*/0,
                              [this](const StepPlan& p, const LayerConfig&) {
                                LayerSchedule s;
                                s.scratch_bytes = scratch_bytes(p);
                                return s;
                              });
  }

  size_t workspace_bytes(const std::vector<LayerConfig>& layers, const StepLimits& limits,
                         const PlanOptions& options) const override {
    return detail::workspace_bound(
        layers, limits, options,
        [this, &layers](const LayerConfig&, const StepLimits& l, const PlanOptions&) {
          // The slab grows with the longest context and the most closed
          // regions, both at most what the limits allow.
          StepPlan widest;
          widest.layers = layers;
          widest.context_capacity = static_cast<int32_t>(l.max_context);
          widest.max_closed = static_cast<int32_t>(l.max_context / kRegionSize);
          return detail::BackendBytes{scratch_bytes(widest), 0};
        });
  }

  void prepare_step(const StepPlan& plan, Workspace workspace, Stream) override {
    detail::validate_workspace(plan, workspace);
    // The cpu backend throws instead of recording faults, but the status
    // word must still read zero after prepare_step, as on cuda (contract.md).
    *reinterpret_cast<DeviceStatus*>(static_cast<std::byte*>(workspace.data) +
                                     plan.workspace.status_offset) = DeviceStatus{};
    auto* meta = reinterpret_cast<int32_t*>(static_cast<std::byte*>(workspace.data) +
                                            plan.workspace.row_meta_offset);
    const auto n = static_cast<size_t>(plan.num_tokens);
    std::copy(plan.row_request.begin(), plan.row_request.end(), meta);
    std::copy(plan.row_position.begin(), plan.row_position.end(), meta + n);
  }

  void write_kv(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                TensorView key, TensorView value, const KVCacheView& kv, Stream) override {
    const StepDesc s = views_only(step);
    detail::validate_step(config, s, plan, kHost);
    check_kv(config, plan, kv);
    detail::validate_kv_inputs(config, plan, key, value, kHost);
    OwnedRows rows(config, s, plan);
    check_live_ids(config, s, plan, rows.rows, kv.num_blocks, 0);
    kernel::write_kv(args(config, s, plan, rows.rows), key, value, kv);
  }

  void write_kv(const LayerConfig& config, TensorView slot_mapping, TensorView key,
                TensorView value, const KVCacheView& kv, Stream) override {
    check_slot_write(config, slot_mapping, key, value, kv);
    kernel::write_kv_slots(config, pool_, slot_mapping, key, value, kv);
  }

  void update_summaries(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                        TensorView index_key, TensorView index_z, const LayerCache& cache,
                        Stream) override {
    const StepDesc s = views_only(step);
    check_step(config, s, plan, LayerKind::csa, "update_summaries");
    check_summaries(config, plan, cache.summaries);
    check_ring(config, plan, cache.ring);
    detail::validate_index_rows(config, plan, index_key, index_z, kHost);
    OwnedRows rows(config, s, plan);
    check_live_ids(config, s, plan, rows.rows, cache.summaries.num_blocks, cache.ring.num_entries);
    kernel::update_summaries(args(config, s, plan, rows.rows), index_key, index_z, cache.summaries,
                             cache.ring);
  }

  void indexer_scores(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                      RowRange range, TensorView index_query, TensorView index_weight,
                      const SummaryCacheView& summaries, TensorView scores, Stream) override {
    const StepDesc s = views_only(step);
    check_step(config, s, plan, LayerKind::csa, "indexer_scores");
    detail::validate_rows(plan, range);
    detail::validate_index_query(config, plan, index_query, index_weight, kHost);
    check_summaries(config, plan, summaries);
    detail::validate_scores(config, plan, range, scores, /*optional=*/false, kHost);
    OwnedRows rows(config, s, plan);
    check_live_ids(config, s, plan, rows.rows, summaries.num_blocks, 0);
    OwnedScratch scratch(*this, plan);
    kernel::indexer_scores(args(config, s, plan, rows.rows), scratch.view, range, index_query,
                           index_weight, summaries, scores, /*only_over_topk=*/false);
  }

  void select_regions(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                      RowRange range, TensorView scores, TensorView selected, Stream) override {
    const StepDesc s = views_only(step);
    check_step(config, s, plan, LayerKind::csa, "select_regions");
    detail::validate_rows(plan, range);
    detail::validate_scores(config, plan, range, scores, /*optional=*/true, kHost);
    detail::validate_selected(config, range, selected, kHost);
    OwnedRows rows(config, s, plan);
    OwnedScratch scratch(*this, plan);
    kernel::select_regions(args(config, s, plan, rows.rows), scratch.view, range, scores, selected);
  }

  void sparse_attention(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                        RowRange range, TensorView query, TensorView selected, TensorView gate,
                        const KVCacheView& kv, TensorView output, Stream) override {
    const StepDesc s = views_only(step);
    check_step(config, s, plan, LayerKind::csa, "sparse_attention");
    detail::validate_rows(plan, range);
    detail::validate_query(config, plan, query, gate, kHost);
    detail::validate_selected(config, range, selected, kHost);
    check_kv(config, plan, kv);
    detail::validate_output(config, plan, output, kHost);
    OwnedRows rows(config, s, plan);
    check_selection_contents(config, rows.rows, range, selected);
    check_live_ids(config, s, plan, rows.rows, kv.num_blocks, 0);
    OwnedScratch scratch(*this, plan);
    kernel::sparse_attention(args(config, s, plan, rows.rows), scratch.view, range, query, selected,
                             gate, kv, output);
  }

  void window_attention(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                        TensorView query, TensorView gate, const KVCacheView& kv, TensorView output,
                        Stream) override {
    const StepDesc s = views_only(step);
    check_step(config, s, plan, LayerKind::swa, "window_attention");
    detail::validate_query(config, plan, query, gate, kHost);
    check_kv(config, plan, kv);
    detail::validate_output(config, plan, output, kHost);
    OwnedRows rows(config, s, plan);
    check_live_ids(config, s, plan, rows.rows, kv.num_blocks, 0);
    OwnedScratch scratch(*this, plan);
    kernel::window_attention(args(config, s, plan, rows.rows), scratch.view, query, gate, kv,
                             output);
  }

  void forward_csa(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                   const CsaInputs& in, const LayerCache& cache, const LayerOutputs& out,
                   Workspace workspace, Stream) override {
    const StepDesc s = views_only(step);
    const bool write_kv = !has_flag(in.flags, ForwardFlags::skip_kv_write);
    const bool summarize = !has_flag(in.flags, ForwardFlags::skip_summary_update);
    check_step(config, s, plan, LayerKind::csa, "forward_csa");
    check_kv(config, plan, cache.kv);
    check_summaries(config, plan, cache.summaries);
    if (summarize) check_ring(config, plan, cache.ring);
    if (write_kv) detail::validate_kv_inputs(config, plan, in.key, in.value, kHost);
    if (summarize) detail::validate_index_rows(config, plan, in.index_key, in.index_z, kHost);
    detail::validate_index_query(config, plan, in.index_query, in.index_weight, kHost);
    detail::validate_query(config, plan, in.query, in.gate, kHost);
    detail::validate_output(config, plan, out.output, kHost);
    const RowRange all{0, plan.num_tokens};
    if (out.selected.present()) detail::validate_selected(config, all, out.selected, kHost);
    const Scratch scratch = workspace_scratch(plan, workspace);
    const StepRows rows = workspace_rows(config, s, plan, workspace);
    check_live_ids(config, s, plan, rows, cache.kv.num_blocks,
                   summarize ? cache.ring.num_entries : 0);

    StepArgs a = args(config, s, plan, rows);
    a.zero_padding_rows = !has_flag(in.flags, ForwardFlags::skip_padding_zero);
    if (write_kv) kernel::write_kv(a, in.key, in.value, cache.kv);
    if (summarize) {
      kernel::update_summaries(a, in.index_key, in.index_z, cache.summaries, cache.ring);
    }
    const int64_t G = config.num_kv_heads;
    for (const ScoreChunk& c : plan.chunks) {
      const RowRange chunk = c.rows;
      // Scores only matter for rows that cannot take all their regions.
      TensorView scores;
      if (c.columns > config.topk) {
        scores = workspace_view(workspace, plan.workspace.scores_offset, DType::f32,
                                {chunk.size(), G, plan.score_stride});
        kernel::indexer_scores(a, scratch, chunk, in.index_query, in.index_weight, cache.summaries,
                               scores, /*only_over_topk=*/true);
      }
      // Select straight into the caller's buffer when it wants the selection.
      const TensorView selected = out.selected.present()
                                      ? row_slice(out.selected, chunk)
                                      : workspace_view(workspace, plan.workspace.selected_offset,
                                                       DType::i32, {chunk.size(), G, config.topk});
      kernel::select_regions(a, scratch, chunk, scores, selected);
      kernel::sparse_attention(a, scratch, chunk, in.query, selected, in.gate, cache.kv,
                               out.output);
    }
    if (a.zero_padding_rows) {
      kernel::zero_rows(config, out.output, plan.num_tokens, plan.num_output_rows);
    }
  }

  void forward_swa(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                   const SwaInputs& in, const KVCacheView& kv, const LayerOutputs& out,
                   Workspace workspace, Stream) override {
    const StepDesc s = views_only(step);
    const bool write_kv = !has_flag(in.flags, ForwardFlags::skip_kv_write);
    check_step(config, s, plan, LayerKind::swa, "forward_swa");
    check_kv(config, plan, kv);
    if (write_kv) detail::validate_kv_inputs(config, plan, in.key, in.value, kHost);
    detail::validate_query(config, plan, in.query, in.gate, kHost);
    detail::validate_output(config, plan, out.output, kHost);
    const Scratch scratch = workspace_scratch(plan, workspace);
    const StepRows rows = workspace_rows(config, s, plan, workspace);
    check_live_ids(config, s, plan, rows, kv.num_blocks, 0);

    StepArgs a = args(config, s, plan, rows);
    a.zero_padding_rows = !has_flag(in.flags, ForwardFlags::skip_padding_zero);
    if (write_kv) kernel::write_kv(a, in.key, in.value, kv);
    kernel::window_attention(a, scratch, in.query, in.gate, kv, out.output);
    if (a.zero_padding_rows) {
      kernel::zero_rows(config, out.output, plan.num_tokens, plan.num_output_rows);
    }
  }

 private:
  // Scratch of a single operation, which is given no workspace.
  struct OwnedScratch {
    OwnedScratch(const CpuBackend& backend, const StepPlan& plan)
        : buffer(backend.scratch_bytes(plan)), view{buffer.data(), scratch_slab_bytes(plan)} {}
    std::vector<std::byte> buffer;
    Scratch view;
  };

  // Rows of a single operation, in a table of its own.
  struct OwnedRows {
    OwnedRows(const LayerConfig& config, const StepDesc& step, const StepPlan& plan)
        : table(rows_from_views(plan) ? 2 * static_cast<size_t>(plan.num_tokens) : 0),
          rows(step_rows(config, step, plan, table.data())) {}
    std::vector<int32_t> table;
    StepRows rows;
  };

  size_t scratch_bytes(const StepPlan& plan) const {
    return scratch_slab_bytes(plan) * static_cast<size_t>(pool_.size());
  }

  // The workspace's scratch region, one slab per pool thread.
  Scratch workspace_scratch(const StepPlan& plan, const Workspace& workspace) const {
    detail::validate_workspace(plan, workspace);
    const size_t need = scratch_bytes(plan);
    require(plan.workspace.scratch_bytes >= need, ErrorCode::invalid_argument,
            "plan: workspace scratch expected >= ", need, " bytes for this cpu backend (",
            pool_.size(), " threads), got ", plan.workspace.scratch_bytes,
            "; plan the step with the backend that runs it");
    return {static_cast<std::byte*>(workspace.data) + plan.workspace.scratch_offset,
            scratch_slab_bytes(plan)};
  }

  // A forward's rows: view-derived ones go to the workspace's row table,
  // which prepare_step filled with the plan's (they differ only there).
  static StepRows workspace_rows(const LayerConfig& config, const StepDesc& step,
                                 const StepPlan& plan, const Workspace& workspace) {
    auto* table = reinterpret_cast<int32_t*>(static_cast<std::byte*>(workspace.data) +
                                             plan.workspace.row_meta_offset);
    return step_rows(config, step, plan, table);
  }

  StepArgs args(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                const StepRows& rows) {
    return {config, step, plan, rows, pool_};
  }

  ThreadPool pool_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options) {
  return std::make_unique<CpuBackend>(resolve_threads(options));
}

}  // namespace step5::cpu
