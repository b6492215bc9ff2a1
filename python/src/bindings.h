// The pieces of the _ext module, each bound in its own file.
#pragma once

#include <nanobind/nanobind.h>

namespace step5::python {

void bind_config(nanobind::module_& m);
void bind_backend(nanobind::module_& m);
void bind_attention_step(nanobind::module_& m);

}  // namespace step5::python
