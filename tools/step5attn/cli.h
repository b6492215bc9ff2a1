// Argument parsing and device selection shared by the subcommands.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "step5/attention.h"

namespace step5::tool {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

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

// "cpu", "cuda" or "auto" (cuda when it can run here, else cpu). Writes which
// backend runs, and for auto why cuda was not taken, to `log`. Throws
// step5::Error when an explicitly requested backend cannot run.
// Whether `device` is a value --device accepts: cpu, cuda or auto.
bool valid_device(const std::string& device);
std::unique_ptr<Backend> open_backend(const std::string& device, std::ostream& log);

// "step5attn <command>: error: <message>" on stderr.
void print_error(const char* command, const std::string& message);

}  // namespace step5::tool
