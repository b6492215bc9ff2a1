// Backend: a step5 backend and the device its arrays live on.
#include <nanobind/stl/string.h>

#include <string>

#include "attention_step.h"
#include "bindings.h"

namespace step5::python {

namespace nb = nanobind;
using namespace nb::literals;

void bind_backend(nb::module_& m) {
  nb::class_<BackendHandle>(m, "Backend", "A cpu or cuda backend (step5::make_backend).")
      .def(
          "__init__",
          [](BackendHandle* self, const std::string& kind, int num_threads, int device_id) {
            BackendOptions options;
            options.num_threads = num_threads;
            options.device_id = device_id;
            std::unique_ptr<Backend> backend =
                make_backend(parse_backend_kind(kind.c_str()), options);
            const Placement placement{backend->device(), device_id};
            new (self) BackendHandle{std::move(backend), placement};
          },
          "kind"_a = "cpu", nb::kw_only(), "num_threads"_a = 0, "device_id"_a = 0,
          "kind: 'cpu' or 'cuda'. num_threads: cpu worker threads (0 = all cores). "
          "device_id: the GPU. Raises NotImplementedError when the backend cannot run here "
          "(not built, no driver, no Hopper GPU) with what is missing.")
      .def_prop_ro(
          "kind",
          [](const BackendHandle& b) { return std::string(backend_kind_name(b.backend->kind())); })
      .def_prop_ro(
          "device",
          [](const BackendHandle& b) { return std::string(device_name(b.placement.device)); })
      .def_prop_ro("device_id", [](const BackendHandle& b) { return b.placement.device_id; })
      .def("__repr__", [](const BackendHandle& b) {
        return std::string("Backend('") + backend_kind_name(b.backend->kind()) + "')";
      });
}

}  // namespace step5::python
