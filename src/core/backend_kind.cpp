// Names of the backend kinds. The factory that creates backends lives in
// src/backend_factory.cpp, outside core, so core never includes a backend.
#include <cstring>

#include "core/check.h"
#include "step5/attention.h"

namespace step5 {

const char* backend_kind_name(BackendKind kind) {
  return kind == BackendKind::cpu ? "cpu" : "cuda";
}

BackendKind parse_backend_kind(const char* name) {
  if (name != nullptr && std::strcmp(name, "cpu") == 0) return BackendKind::cpu;
  if (name != nullptr && std::strcmp(name, "cuda") == 0) return BackendKind::cuda;
  detail::fail_invalid("backend: expected cpu or cuda, got '", name ? name : "(null)", "'");
}

}  // namespace step5
