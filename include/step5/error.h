// Errors raised at the API boundary. Every check names what was wrong, what
// was expected and what was given, so an engine log line is enough to fix
// the caller.
#pragma once

#include <stdexcept>
#include <string>

namespace step5 {

enum class ErrorCode {
  invalid_argument,  // a value, shape, dtype or stride the contract forbids
  out_of_range,      // an index (block id, ring index, slot) past its table
  unsupported,       // valid in principle, not built here (dtype, GPU, size)
  device_error,      // the device runtime failed (CUDA error, no GPU)
  io_error,          // a file could not be read or written, or is malformed
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace step5
