#include "cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/plan.h"
#include "core/validate.h"
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/forward.h"
#include "cuda/schedule.h"
#include "cuda/tile_attention/tile_choice.h"
#include "cuda/views.h"

namespace step5::cuda {

namespace {

constexpr Device kDev = Device::cuda;

char* at(Workspace ws, size_t offset) {
  return static_cast<char*>(ws.data) + offset;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const BackendOptions& options)
      : info_(require_device(options.device_id, options.cuda_kernels)) {
    set_select_active_clusters(info_);
    STEP5_CUDA_CHECK(cudaEventCreateWithFlags(&staging_done_, cudaEventDisableTiming));
  }
  ~CudaBackend() override {
    // Destructors must not throw: failures here only leak.
    if (staging_done_ != nullptr) {
      cudaEventSynchronize(staging_done_);
      cudaEventDestroy(staging_done_);
    }
    if (staging_ != nullptr) cudaFreeHost(staging_);
    if (op_scratch_ != nullptr) cudaFree(op_scratch_);
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const DeviceInfo& info() const { return info_; }

  BackendKind kind() const override { return BackendKind::cuda; }
  Device device() const override { return kDev; }

  StepPlan plan(const StepDesc& step, const std::vector<LayerConfig>& layers,
                const PlanOptions& options) const override {
    return detail::build_plan(step, layers, options, info_.sm_count,
                              [this](const StepPlan& p, const LayerConfig& layer) {
                                return schedule_layer(info_, p, layer);
                              });
  }

  size_t workspace_bytes(const std::vector<LayerConfig>& layers, const StepLimits& limits,
                         const PlanOptions& options) const override {
    // A layer's attention runs over at most max_tokens rows (CSA: a scoring
    // chunk, SWA: the step), and its split scratch depends on rows only.
    return detail::workspace_bound(
        layers, limits, options,
        [this](const LayerConfig& layer, const StepLimits& l, const PlanOptions&) {
          const int64_t rows = std::max<int64_t>(l.max_tokens, 1);
          const PagedAttentionBytes most = paged_attention_max_bytes(layer, rows, info_.sm_count);
          size_t scratch = most.scratch;
          if (csa_tiles_may_be_chosen(info_, layer)) {
            // The per-tile choice's arrays after the partials (schedule.cpp).
            scratch = detail::align_up(scratch, detail::kWorkspaceAlign) + tile_choice_bytes(rows);
          }
          return detail::BackendBytes{scratch, most.counters};
        });
  }

  void prepare_step(const StepPlan& plan, Workspace workspace, Stream stream) override {
    detail::validate_workspace(plan, workspace);
    activate();
    const cudaStream_t s = to_cuda_stream(stream);
    // The indexer's per-row best scores and the split-KV arrival counters
    // start from zero; each select and each last split clears what it used,
    // so one clear per step (per workspace) suffices.
    // The device status word (just before row_max) restarts with the step.
    const size_t cleared = plan.workspace.selected_offset - plan.workspace.status_offset;
    STEP5_CUDA_CHECK(cudaMemsetAsync(at(workspace, plan.workspace.status_offset), 0, cleared, s));
    if (plan.workspace.counters_bytes > 0) {
      STEP5_CUDA_CHECK(cudaMemsetAsync(at(workspace, plan.workspace.counters_offset), 0,
                                       plan.workspace.counters_bytes, s));
    }
    // Uniform steps derive row metadata on device and empty steps have none.
    if (plan.kind != StepKind::mixed) return;
    const size_t n = static_cast<size_t>(plan.num_tokens);
    // Requests, positions, untiled rows, row tiles (WorkspaceLayout::row_meta_offset).
    const size_t bytes = 5 * n * sizeof(int32_t);
    // The previous step's copy may still read the staging buffer.
    STEP5_CUDA_CHECK(cudaEventSynchronize(staging_done_));
    if (bytes > staging_bytes_) {
      if (staging_ != nullptr) STEP5_CUDA_CHECK(cudaFreeHost(staging_));
      staging_ = nullptr;
      staging_bytes_ = 0;
      STEP5_CUDA_CHECK(cudaMallocHost(&staging_, bytes));
      staging_bytes_ = bytes;
    }
    auto* host = static_cast<int32_t*>(staging_);
    std::memcpy(host, plan.row_request.data(), n * sizeof(int32_t));
    std::memcpy(host + n, plan.row_position.data(), n * sizeof(int32_t));
    std::memcpy(host + 2 * n, plan.untiled_rows.data(), plan.untiled_rows.size() * sizeof(int32_t));
    std::memcpy(host + 3 * n, plan.row_tiles.data(), plan.row_tiles.size() * sizeof(int32_t));
    STEP5_CUDA_CHECK(cudaMemcpyAsync(at(workspace, plan.workspace.row_meta_offset), host, bytes,
                                     cudaMemcpyHostToDevice, s));
    STEP5_CUDA_CHECK(cudaEventRecord(staging_done_, s));
  }

  // --- single operations ---------------------------------------------------

  void write_kv(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                TensorView key, TensorView value, const KVCacheView& kv, Stream stream) override {
    detail::validate_step(config, step, plan, kDev);
    validate_kv(config, plan, kv);
    detail::validate_kv_inputs(config, plan, key, value, kDev);
    activate();
    launch_kv_write(kv_write_params(config, step, plan, key, value, kv, nullptr), config.kv_dtype,
                    to_cuda_stream(stream));
  }

  void write_kv(const LayerConfig& config, TensorView slot_mapping, TensorView key,
                TensorView value, const KVCacheView& kv, Stream stream) override {
    validate_config(config);
    detail::check_tensor(slot_mapping, {"slot_mapping", DType::i64, kDev, {-1}, false, false});
    const int64_t n = slot_mapping.shape[0];
    detail::check_tensor(key,
                         {"key", DType::bf16, kDev, {n, config.num_kv_heads, config.head_size}});
    detail::check_tensor(value,
                         {"value", DType::bf16, kDev, {n, config.num_kv_heads, config.head_size}});
    detail::validate_kv_cache(config, kv, kDev);
    activate();
    launch_kv_write(slot_write_params(config, slot_mapping, key, value, kv, nullptr),
                    config.kv_dtype, to_cuda_stream(stream));
  }

  void update_summaries(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                        TensorView index_key, TensorView index_z, const LayerCache& cache,
                        Stream stream) override {
    require_kind(config, LayerKind::csa, "update_summaries");
    detail::validate_step(config, step, plan, kDev);
    validate_summary_state(config, plan, cache);
    detail::validate_index_rows(config, plan, index_key, index_z, kDev);
    activate();
    run_summaries(config, step, plan, index_key, index_z, cache, to_cuda_stream(stream));
  }

  void indexer_scores(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                      RowRange rows, TensorView index_query, TensorView index_weight,
                      const SummaryCacheView& summaries, TensorView scores,
                      Stream stream) override {
    require_kind(config, LayerKind::csa, "indexer_scores");
    const LayerSchedule& schedule = plan.schedule(config);
    detail::validate_step(config, step, plan, kDev);
    detail::validate_rows(plan, rows);
    detail::validate_index_query(config, plan, index_query, index_weight, kDev);
    detail::validate_summary_cache(config, summaries, kDev);
    detail::validate_block_ids(config, plan, summaries.num_blocks);
    detail::validate_scores(config, plan, rows, scores, /*optional=*/false, kDev);
    activate();
    // Every row is scored (skip_topk -1) and the tail C <= j < S is -inf.
    // The plan's schedule was made for the forward; when it skips scoring
    // (no row with C > K) the generic path serves the single operation.
    const IndexerPath path =
        schedule.indexer == IndexerPath::none ? IndexerPath::generic : schedule.indexer;
    const ScoreTarget target{static_cast<float*>(scores.data), scores.stride[0], scores.stride[1],
                             static_cast<int32_t>(scores.shape[2]), nullptr};
    const IndexerParams p =
        indexer_params(config, schedule, step, row_meta(step, plan, nullptr), rows, index_query,
                       index_weight, summaries, target, /*skip_topk=*/-1, nullptr);
    const cudaStream_t s = to_cuda_stream(stream);
    launch_indexer(p, path, config.summary_dtype, info_.max_smem_per_block, s);
    launch_score_tail(p, s);
  }

  void select_regions(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                      RowRange rows, TensorView scores, TensorView selected,
                      Stream stream) override {
    require_kind(config, LayerKind::csa, "select_regions");
    detail::validate_step(config, step, plan, kDev);
    detail::validate_rows(plan, rows);
    detail::validate_scores(config, plan, rows, scores, /*optional=*/true, kDev);
    detail::validate_selected(config, rows, selected, kDev);
    activate();
    const auto columns = static_cast<int32_t>(scores.present() ? scores.shape[2] : 0);
    // The plan's instance choice; launched normally (no kernel before it
    // in this operation waits for it).
    LayerSchedule schedule = plan.schedule(config);
    schedule.programmatic_launch = false;
    launch_select(select_params(config, schedule, row_meta(step, plan, nullptr), rows, scores,
                                columns, /*row_max=*/nullptr, selected, SelectCacheWork{}, nullptr),
                  to_cuda_stream(stream));
  }

  void sparse_attention(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                        RowRange rows, TensorView query, TensorView selected, TensorView gate,
                        const KVCacheView& kv, TensorView output, Stream stream) override {
    require_kind(config, LayerKind::csa, "sparse_attention");
    const LayerSchedule& schedule = plan.schedule(config);
    detail::validate_step(config, step, plan, kDev);
    detail::validate_rows(plan, rows);
    detail::validate_query(config, plan, query, gate, kDev);
    detail::validate_selected(config, rows, selected, kDev);
    validate_kv(config, plan, kv);
    detail::validate_output(config, plan, output, kDev);
    activate();
    LayerSchedule op = schedule;
    op.attention_splits = paged_attention_splits(config, rows.size(), info_.sm_count);
    AttentionTarget target;
    target.output = output;
    target.selected = selected;
    use_op_scratch(target, config, rows.size(), op.attention_splits, stream);
    launch_paged_attention(attention_params(config, op, step, row_meta(step, plan, nullptr), rows,
                                            query, gate, kv, target, nullptr),
                           to_cuda_stream(stream));
  }

  void window_attention(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                        TensorView query, TensorView gate, const KVCacheView& kv, TensorView output,
                        Stream stream) override {
    require_kind(config, LayerKind::swa, "window_attention");
    const LayerSchedule& schedule = plan.schedule(config);
    detail::validate_step(config, step, plan, kDev);
    detail::validate_query(config, plan, query, gate, kDev);
    validate_kv(config, plan, kv);
    detail::validate_output(config, plan, output, kDev);
    activate();
    AttentionTarget target;
    target.output = output;
    use_op_scratch(target, config, plan.num_tokens, schedule.attention_splits, stream);
    launch_paged_attention(attention_params(config, schedule, step, row_meta(step, plan, nullptr),
                                            {0, plan.num_tokens}, query, gate, kv, target, nullptr),
                           to_cuda_stream(stream));
  }

  // --- whole layers --------------------------------------------------------

  void forward_csa(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                   const CsaInputs& in, const LayerCache& cache, const LayerOutputs& out,
                   Workspace workspace, Stream stream) override {
    activate();
    run_forward_csa(info_, config, step, plan, in, cache, out, workspace, to_cuda_stream(stream));
  }
  void forward_swa(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                   const SwaInputs& in, const KVCacheView& kv, const LayerOutputs& out,
                   Workspace workspace, Stream stream) override {
    activate();
    run_forward_swa(config, step, plan, in, kv, out, workspace, to_cuda_stream(stream));
  }

 private:
  // Kernels run on the backend's GPU whatever the caller's current device.
  void activate() const {
    int current = -1;
    STEP5_CUDA_CHECK(cudaGetDevice(&current));
    if (current != info_.device_id) set_device(info_.device_id);
  }

  // Single operations get no workspace; their split-KV partials and
  // counters live in a buffer the backend grows here (never inside a
  // forward). Counters come first; a launch leaves its counters zero and
  // writes partials after them, so only counters beyond the last launch's
  // need clearing.
  void use_op_scratch(AttentionTarget& target, const LayerConfig& config, int64_t rows, int splits,
                      Stream stream) {
    const size_t counters = paged_attention_counters_bytes(config, rows, splits);
    const size_t bytes = counters + paged_attention_scratch_bytes(config, rows, splits);
    if (bytes > op_scratch_bytes_) {
      if (op_scratch_ != nullptr) STEP5_CUDA_CHECK(cudaFree(op_scratch_));
      op_scratch_ = nullptr;
      op_scratch_bytes_ = 0;
      STEP5_CUDA_CHECK(cudaMalloc(&op_scratch_, bytes));
      op_scratch_bytes_ = bytes;
      op_counters_zero_ = 0;
    }
    if (counters > op_counters_zero_) {
      STEP5_CUDA_CHECK(cudaMemsetAsync(op_scratch_, 0, counters, to_cuda_stream(stream)));
    }
    op_counters_zero_ = counters;
    target.split_arrivals = counters > 0 ? static_cast<uint32_t*>(op_scratch_) : nullptr;
    target.scratch = bytes > counters ? static_cast<char*>(op_scratch_) + counters : nullptr;
    target.scratch_bytes = bytes - counters;
  }

  DeviceInfo info_;
  cudaEvent_t staging_done_ = nullptr;
  void* staging_ = nullptr;  // pinned i32 [5 n] row metadata for prepare_step
  size_t staging_bytes_ = 0;
  void* op_scratch_ = nullptr;
  size_t op_scratch_bytes_ = 0;
  size_t op_counters_zero_ = 0;  // leading bytes of op_scratch_ known to be zero
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

bool cuda_backend_available(int device_id, std::string* why) {
  return device_available(device_id, why);
}

std::string cuda_backend_summary(const Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  detail::require(cuda != nullptr, ErrorCode::invalid_argument,
                  "cuda_backend_summary: expected a cuda backend, got ",
                  backend_kind_name(backend.kind()));
  const DeviceInfo& d = cuda->info();
  return detail::concat("GPU ", d.device_id, " '", d.name, "' (compute capability ", d.major, ".",
                        d.minor, ", ", d.sm_count, " SMs, ", d.max_smem_per_block / 1024,
                        " KB shared memory per block), kernels ", kernel_path_name(d.path),
                        ", selection clusters of 2 / 4 / 8 CTAs: ", d.select_active_clusters[1],
                        " / ", d.select_active_clusters[2], " / ", d.select_active_clusters[3],
                        " at once");
}

bool cuda_backend_portable(const Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  return cuda != nullptr && cuda->info().path == KernelPath::portable;
}

}  // namespace step5::cuda
