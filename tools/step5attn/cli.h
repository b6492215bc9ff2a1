// Argument parsing and device selection shared by the subcommands.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "step5/attention.h"

namespace step5::tool {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
// The command needs something this machine lacks (a cuda backend in the
// build, a driver, a GPU of compute capability >= 8.0); distinct from 1 so scripts can skip.
constexpr int kExitCannotRun = 3;

// Thrown when a backend that was asked for explicitly cannot run here; the
// message says what is missing. main() turns it into kExitCannotRun.
class CannotRunHere : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Empty when the cuda backend can run here, else what is missing.
std::string cuda_unavailable_reason();

// One "--name VALUE" (value != null) or "--name" flag (flag != null).
struct Option {
  const char* name;
  std::string* value = nullptr;
  bool* flag = nullptr;
};

// Parses argv[1..) into options (also "--name=VALUE") and positionals. On a
// bad argument writes one line to `error` and returns false.
bool parse_args(int argc, char** argv, const std::vector<Option>& options,
                std::vector<std::string>& positional, std::string& error);

// A decimal integer in [min, max] or false.
bool parse_int(const std::string& text, int64_t min, int64_t max, int64_t& out);

// Whether `device` is a value --device accepts: cpu, cuda or auto.
bool valid_device(const std::string& device);
// "cpu", "cuda" or "auto" (cuda when it can run here, else cpu). Writes which
// backend runs, and for auto why cuda was not taken, to `log`. Throws
// CannotRunHere when an explicitly requested backend cannot run.
std::unique_ptr<Backend> open_backend(const std::string& device, std::ostream& log);

// "step5attn <command>: error: <message>" on stderr.
void print_error(const char* command, const std::string& message);

}  // namespace step5::tool
