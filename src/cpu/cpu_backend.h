// The reference backend: every SPEC operation on the host in fp32, threaded
// over rows. It is the oracle other backends are checked against.
#pragma once

#include <memory>

#include "step5/attention.h"

namespace step5::cpu {

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options);

}  // namespace step5::cpu
