// step5_attention._ext: the runtime bindings. Links only the step5 runtime
// (no oracle, no simulator); step5_attention._testing_ext has those.
#include <nanobind/nanobind.h>

#include "bindings.h"
#include "errors.h"

NB_MODULE(_ext, m) {
  namespace py = step5::python;
  m.doc() = "step5-attention: CSA and SWA attention for LLM serving (runtime bindings)";
  m.attr("__version__") = STEP5_VERSION;
#if defined(STEP5_HAVE_CUDA)
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
  py::register_error_translator();
  py::bind_config(m);
  py::bind_backend(m);
  py::bind_attention_step(m);
}
