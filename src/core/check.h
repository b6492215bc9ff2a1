// Internal helpers to raise step5::Error with "what: expected X, got Y".
#pragma once

#include <sstream>
#include <string>
#include <utility>

#include "step5/error.h"
#include "step5/tensor.h"

namespace step5::detail {

template <class... Args>
std::string concat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

[[noreturn]] inline void fail(ErrorCode code, const std::string& message) {
  throw Error(code, message);
}

template <class... Args>
[[noreturn]] void fail_invalid(Args&&... args) {
  fail(ErrorCode::invalid_argument, concat(std::forward<Args>(args)...));
}

template <class... Args>
void require(bool ok, ErrorCode code, Args&&... args) {
  if (!ok) fail(code, concat(std::forward<Args>(args)...));
}

std::string shape_string(const TensorView& view);

// Checks a tensor argument: present (unless optional and absent), dtype,
// device, rank, each dimension against `dims` (-1 = any, the first dimension
// is checked as ">= dims[0]" when min_rows is set) and a contiguous
// innermost dimension. `what` names the argument in the message.
struct TensorSpec {
  const char* what;
  DType dtype;
  Device device;
  std::initializer_list<int64_t> dims;
  bool optional = false;
  bool min_rows = true;  // dims[0] is a lower bound (padded inputs)
};
void check_tensor(const TensorView& view, const TensorSpec& spec);

}  // namespace step5::detail
