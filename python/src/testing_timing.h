// The C++ side of the per-call overhead measurement (python/bench): the
// same one-token decode step the Python bench times, run from C++ alone.
#pragma once

#include <cstdint>

#include "step5/config.h"

namespace step5::python {

// Seconds per forward_csa of a one-request, one-token decode step at
// `context` tokens on the cpu backend (zeroed cache and inputs), or of an
// empty step (no request, no row) when `empty`.
double cpp_decode_forward_seconds(const LayerConfig& config, int64_t context, int64_t iterations,
                                  int num_threads, bool empty);

}  // namespace step5::python
