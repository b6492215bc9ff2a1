// Internal helpers to raise step5::Error with "what: expected X, got Y".
#pragma once

#include <charconv>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "step5/error.h"
#include "step5/tensor.h"

namespace step5::detail {

// Message pieces are appended without iostreams: a Python extension linked
// against a static libstdc++ (some toolchains' default, e.g. -Bsymbolic
// wrappers) crashed inside std::ostream's number formatting on its first
// error message, and errors must never take an engine down. Numbers print
// as an ostream would by default (integers in decimal, floating point as
// %g), chars as characters.
inline void append(std::string& out, std::string_view text) {
  out.append(text.data(), text.size());
}
inline void append(std::string& out, const char* text) {
  out += text;
}
inline void append(std::string& out, char c) {
  out += c;
}
inline void append(std::string& out, bool b) {
  out += b ? '1' : '0';
}
template <class T>
std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, char>>
append(std::string& out, T value) {
  char buf[24];
  const auto end = std::to_chars(buf, buf + sizeof buf, value).ptr;
  out.append(buf, static_cast<size_t>(end - buf));
}
template <class T>
std::enable_if_t<std::is_floating_point_v<T>> append(std::string& out, T value) {
  char buf[32];
  const int n = std::snprintf(buf, sizeof buf, "%g", static_cast<double>(value));
  out.append(buf, static_cast<size_t>(n > 0 ? n : 0));
}

template <class... Args>
std::string concat(Args&&... args) {
  std::string out;
  (append(out, std::forward<Args>(args)), ...);
  return out;
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
