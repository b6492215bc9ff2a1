// Backend: a step5 backend and the device its arrays live on.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "attention_step.h"
#include "bindings.h"

namespace step5::python {

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// Backend.write_kv: no step, no plan; the engine's own cache-write op.
void write_kv_slots(BackendHandle& b, const LayerConfig& config, const InArray& slot_mapping,
                    const InArray& key, const InArray& value, const OutArray& kv_cache,
                    uintptr_t stream) {
  const Placement& at = b.placement;
  const TensorView slots = input_view(slot_mapping, "slot_mapping", DType::i64, at);
  const TensorView k = input_view(key, "key", DType::bf16, at);
  const TensorView v = input_view(value, "value", DType::bf16, at);
  const LayerCache cache = layer_cache(config, kv_cache, std::nullopt, at);
  nb::gil_scoped_release unlocked;
  b.backend->write_kv(config, slots, k, v, cache.kv, to_stream(stream));
}

size_t workspace_bound(const BackendHandle& b, const std::vector<LayerConfig>& layers,
                       int64_t max_tokens, int32_t max_requests, int64_t max_context,
                       std::optional<size_t> max_score_bytes, int64_t plan_max_context) {
  PlanOptions options;
  if (max_score_bytes) options.max_score_bytes = *max_score_bytes;
  options.max_context = plan_max_context;
  return b.backend->workspace_bytes(layers, StepLimits{max_tokens, max_requests, max_context},
                                    options);
}

}  // namespace

void bind_backend(nb::module_& m) {
  nb::class_<BackendHandle>(m, "Backend", "A cpu or cuda backend (step5::make_backend).")
      .def(
          "__init__",
          [](BackendHandle* self, const std::string& kind, int num_threads, int device_id,
             const std::string& cuda_kernels) {
            BackendOptions options;
            options.num_threads = num_threads;
            options.device_id = device_id;
            options.cuda_kernels = parse_cuda_kernels(cuda_kernels.c_str());
            std::unique_ptr<Backend> backend =
                make_backend(parse_backend_kind(kind.c_str()), options);
            const Placement placement{backend->device(), device_id};
            new (self) BackendHandle{std::move(backend), placement};
          },
          "kind"_a = "cpu", nb::kw_only(), "num_threads"_a = 0, "device_id"_a = 0,
          "cuda_kernels"_a = "auto",
          "kind: 'cpu' or 'cuda'. num_threads: cpu worker threads (0 = all cores). "
          "device_id: the GPU. cuda_kernels: 'auto' (Hopper's sm_90a kernels on Hopper, the "
          "portable ones elsewhere) or 'portable' (the portable kernels on any GPU). Raises "
          "NotImplementedError when the backend cannot run here (not built, no driver, no GPU "
          "of compute capability 8.0 or newer) with what is missing, ValueError for a bad "
          "option.")
      .def_prop_ro(
          "kind",
          [](const BackendHandle& b) { return std::string(backend_kind_name(b.backend->kind())); })
      .def_prop_ro(
          "device",
          [](const BackendHandle& b) { return std::string(device_name(b.placement.device)); })
      .def_prop_ro("device_id", [](const BackendHandle& b) { return b.placement.device_id; })
      .def("write_kv", &write_kv_slots, "config"_a, "slot_mapping"_a, "key"_a, "value"_a,
           nb::kw_only(), "kv_cache"_a, "stream"_a = 0,
           "Stores key/value row t at slot_mapping[t] (i64 [n]) without a step or plan, for "
           "an engine that writes the cache in its own op before attention; negative slots "
           "(padding, vLLM's -1) are skipped.")
      .def("workspace_bytes", &workspace_bound, "layers"_a, nb::kw_only(), "max_tokens"_a,
           "max_requests"_a, "max_context"_a, "max_score_bytes"_a.none() = nb::none(),
           "plan_max_context"_a = 0,
           "Workspace bytes that serve every step of `layers` with at most max_tokens rows, "
           "max_requests requests and max_context tokens per sequence (plans with "
           "max_context <= that): allocate once before planning or capturing graphs.")
      .def("__repr__", [](const BackendHandle& b) {
        return std::string("Backend('") + backend_kind_name(b.backend->kind()) + "')";
      });
}

}  // namespace step5::python
