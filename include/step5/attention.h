// The backend interface: every SPEC operation and one forward per layer kind.
//
// Each operation validates its arguments at the boundary and throws
// step5::Error (what, expected, got) before touching any output. The cpu
// backend is the reference; the cuda backend implements the same interface.
#pragma once

#include <memory>
#include <vector>

#include "step5/cache.h"
#include "step5/config.h"
#include "step5/error.h"
#include "step5/step.h"
#include "step5/tensor.h"

namespace step5 {

// cudaStream_t for the cuda backend (null = default stream); ignored by cpu.
using Stream = void*;

enum class BackendKind : uint8_t { cpu, cuda };
const char* backend_kind_name(BackendKind kind);
// "cpu" or "cuda"; throws on anything else.
BackendKind parse_backend_kind(const char* name);

// Which kernels the cuda backend runs (the cpu backend has one path and
// ignores it).
//   automatic: the fastest set this GPU and this build have: on Hopper
//     (compute capability 9.0, sm_90a in the build) the sm_90a kernels
//     (tensor-core indexer on wgmma), on every other GPU of compute
//     capability >= 8.0 the portable kernels.
//   portable: the portable kernels on any GPU, Hopper included (the
//     indexer's generic fp32 path, everything else as on Hopper: mma.sync
//     and cp.async, sm_80 features). For checking that path on a Hopper GPU;
//     slower there. On sm_90+ the launches keep two features of the GPU
//     that change no kernel's arithmetic: programmatic dependent launch,
//     and the selection split over thread-block clusters for few long rows
//     (LayerSchedule::select_cluster_parts).
enum class CudaKernels : uint8_t { automatic, portable };
const char* cuda_kernels_name(CudaKernels kernels);
// "auto" or "portable"; throws Error(invalid_argument) on anything else.
CudaKernels parse_cuda_kernels(const char* name);

struct BackendOptions {
  int num_threads = 0;  // cpu: worker threads; 0 = hardware concurrency
  int device_id = 0;    // cuda: the GPU to use
  CudaKernels cuda_kernels = CudaKernels::automatic;  // cuda: which kernels (above)
};

// What a forward leaves to the caller (the seed's fusions and its split of
// the cache write from attention). Bits; combine with |.
enum class ForwardFlags : uint32_t {
  none = 0,
  // The engine wrote this step's K/V at slot_mapping before the forward (its
  // own op, or write_kv): the forward writes no K/V; key and value may be
  // absent (the seed's forward_includes_kv_cache_update = False).
  skip_kv_write = 1u << 0,
  // CSA: update_summaries already ran for this step (summaries and rings):
  // the forward neither summarizes nor writes rings; index_key and index_z
  // may be absent (the seed's dsa_summary_updated).
  skip_summary_update = 1u << 1,
  // Output rows past the step's rows (n.. and the rows of padding requests)
  // are left as they are, for the caller to clear or ignore (the seed's
  // defer_inactive_clear).
  skip_padding_zero = 1u << 2,
};
constexpr ForwardFlags operator|(ForwardFlags a, ForwardFlags b) {
  return static_cast<ForwardFlags>(static_cast<uint32_t>(a) | static_cast<uint32_t>(b));
}
constexpr bool has_flag(ForwardFlags flags, ForwardFlags bit) {
  return (static_cast<uint32_t>(flags) & static_cast<uint32_t>(bit)) != 0;
}

// Inputs of one CSA layer for one step. Every view has at least n rows; the
// innermost dimension must be contiguous, outer strides are free.
struct CsaInputs {
  TensorView query;         // bf16 [n, H, D]
  TensorView key;           // bf16 [n, G, D]
  TensorView value;         // bf16 [n, G, D]
  TensorView index_query;   // bf16 [n, G, I, Di]
  TensorView index_weight;  // f32  [n, G, I]
  TensorView index_key;     // bf16 [n, Di]
  TensorView index_z;       // f32  [n]
  TensorView gate;          // bf16 [n, H]; optional (absent = no gate)
  ForwardFlags flags = ForwardFlags::none;
};

struct SwaInputs {
  TensorView query;                         // bf16 [n, H, D]
  TensorView key;                           // bf16 [n, G, D]
  TensorView value;                         // bf16 [n, G, D]
  TensorView gate;                          // bf16 [n, H]; optional
  ForwardFlags flags = ForwardFlags::none;  // skip_summary_update does not apply
};

struct LayerOutputs {
  TensorView output;    // bf16 [num_output_rows, H, D]; rows n.. are zeroed
  TensorView selected;  // i32 [n, G, K]; optional (CSA): each row's selected
                        // regions in ascending order, -1 padded
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  virtual Device device() const = 0;

  // Host-side plan for one step, valid for every layer in `layers`.
  virtual StepPlan plan(const StepDesc& step, const std::vector<LayerConfig>& layers,
                        const PlanOptions& options = {}) const = 0;
  // Once per step before the first forward: copies the plan's row metadata
  // into the workspace (one async copy on the cuda backend).
  virtual void prepare_step(const StepPlan& plan, Workspace workspace, Stream stream) = 0;

  // Workspace bytes that serve every step within `limits` (StepLimits), so
  // an engine can allocate once before its first plan or graph capture.
  // Host arithmetic only; `options` as the plans will use them.
  virtual size_t workspace_bytes(const std::vector<LayerConfig>& layers, const StepLimits& limits,
                                 const PlanOptions& options = {}) const = 0;

  // --- single operations (each is also a stage of forward) ---------------

  // Stores this step's key and value rows at slot_mapping (bf16, or fp8 e4m3
  // of x / scale).
  virtual void write_kv(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                        TensorView key, TensorView value, const KVCacheView& kv, Stream stream) = 0;
  // The same without a step or plan, for an engine that writes the cache in
  // its own op before attention: row t of key/value goes to slot_mapping[t]
  // (i64 [n] on the backend's device; n = slot_mapping.shape[0]); rows with
  // a negative slot are padding and skipped (vLLM marks them -1). The cpu
  // backend raises out_of_range for a slot >= num_blocks * B; the cuda
  // backend cannot see device slots without a sync and skips such rows.
  virtual void write_kv(const LayerConfig& config, TensorView slot_mapping, TensorView key,
                        TensorView value, const KVCacheView& kv, Stream stream) = 0;

  // Writes this step's index rows into the requests' rings and summarizes
  // every region whose eighth row this step writes (prefill chunks, decode,
  // verify, and rewrites of rejected drafts alike).
  virtual void update_summaries(const LayerConfig& config, const StepDesc& step,
                                const StepPlan& plan, TensorView index_key, TensorView index_z,
                                const LayerCache& cache, Stream stream) = 0;

  // scores f32 [rows.size(), G, S], S >= the rows' closed regions: entry
  // (t, g, j) is score(t, g, j) for j < C(t) and -inf for C(t) <= j < S.
  virtual void indexer_scores(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                              RowRange rows, TensorView index_query, TensorView index_weight,
                              const SummaryCacheView& summaries, TensorView scores,
                              Stream stream) = 0;

  // selected i32 [rows.size(), G, K]: all closed regions when C <= K, else
  // the K best (ties to the lower index); ascending, -1 padded. `scores` is
  // only read for rows with C > K and may be absent when no row has.
  virtual void select_regions(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                              RowRange rows, TensorView scores, TensorView selected,
                              Stream stream) = 0;

  // Attention of rows [rows) over their selected regions plus their own
  // region, with the optional gate. `selected` is [rows.size(), G, K] (-1
  // entries skipped); query, gate and output are indexed by step row.
  virtual void sparse_attention(const LayerConfig& config, const StepDesc& step,
                                const StepPlan& plan, RowRange rows, TensorView query,
                                TensorView selected, TensorView gate, const KVCacheView& kv,
                                TensorView output, Stream stream) = 0;

  // Sliding-window attention of every row, with the optional gate.
  virtual void window_attention(const LayerConfig& config, const StepDesc& step,
                                const StepPlan& plan, TensorView query, TensorView gate,
                                const KVCacheView& kv, TensorView output, Stream stream) = 0;

  // --- whole layers ------------------------------------------------------

  // KV write, summary update, scores, selection, attention and gate; zeroes
  // output rows past n (and the rows of padding requests). inputs.flags
  // leave parts to the caller. Uses only `workspace`; no allocation, no
  // host sync.
  virtual void forward_csa(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                           const CsaInputs& inputs, const LayerCache& cache,
                           const LayerOutputs& out, Workspace workspace, Stream stream) = 0;
  virtual void forward_swa(const LayerConfig& config, const StepDesc& step, const StepPlan& plan,
                           const SwaInputs& inputs, const KVCacheView& kv, const LayerOutputs& out,
                           Workspace workspace, Stream stream) = 0;
};

// Throws step5::Error(unsupported / device_error) when the backend cannot
// run here (cuda: not built, no GPU, a GPU of compute capability < 8.0, or
// a build without code for the GPU), and Error(invalid_argument) for
// options out of range.
std::unique_ptr<Backend> make_backend(BackendKind kind, const BackendOptions& options = {});

}  // namespace step5
