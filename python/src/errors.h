// step5::Error -> Python exceptions, by error code, with the library's
// message unchanged: ValueError (invalid_argument), IndexError
// (out_of_range), NotImplementedError (unsupported), RuntimeError (the rest).
#pragma once

#include <string>

#include "step5/error.h"

namespace step5::python {

// Installs the translator; called once by each extension module.
void register_error_translator();

// A bad argument found by the binding itself, reported like the library's
// own checks ("what: expected X, got Y").
[[noreturn]] inline void fail_argument(const std::string& message) {
  throw Error(ErrorCode::invalid_argument, message);
}

}  // namespace step5::python
