#include "step5attn/cli.h"

#include <cstdlib>
#include <cstring>
#include <iostream>

namespace step5::tool {

bool parse_args(int argc, char** argv, const std::vector<Option>& options,
                std::vector<std::string>& positional, std::string& error) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() < 2 || arg.compare(0, 2, "--") != 0) {
      positional.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::string inline_value;
    const bool has_inline = name.find('=') != std::string::npos;
    if (has_inline) {
      inline_value = name.substr(name.find('=') + 1);
      name.resize(name.find('='));
    }
    const Option* match = nullptr;
    for (const Option& option : options) {
      if (name == option.name) match = &option;
    }
    if (!match) {
      error = "unknown option '--" + name + "'";
      return false;
    }
    if (match->flag) {
      if (has_inline) {
        error = "option '--" + name + "' takes no value";
        return false;
      }
      *match->flag = true;
    } else if (has_inline) {
      *match->value = inline_value;
    } else if (i + 1 < argc) {
      *match->value = argv[++i];
    } else {
      error = "option '--" + name + "' needs a value";
      return false;
    }
  }
  return true;
}

bool parse_int(const std::string& text, int64_t min, int64_t max, int64_t& out) {
  if (text.empty() || text.size() > 18) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!(text[i] >= '0' && text[i] <= '9') && !(i == 0 && text[i] == '-' && text.size() > 1)) {
      return false;
    }
  }
  const long long v = std::strtoll(text.c_str(), nullptr, 10);
  if (v < min || v > max) return false;
  out = v;
  return true;
}

bool valid_device(const std::string& device) {
  return device == "cpu" || device == "cuda" || device == "auto";
}

std::string cuda_unavailable_reason() {
  try {
    make_backend(BackendKind::cuda);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

std::unique_ptr<Backend> open_backend(const std::string& device, std::ostream& log) {
  if (device != "auto") {
    std::unique_ptr<Backend> backend;
    try {
      backend = make_backend(parse_backend_kind(device.c_str()));
    } catch (const Error& e) {
      if (e.code() != ErrorCode::unsupported && e.code() != ErrorCode::device_error) throw;
      throw CannotRunHere("--device " + device + ": " + e.what());
    }
    log << "device: " << device << "\n";
    return backend;
  }
  try {
    auto backend = make_backend(BackendKind::cuda);
    log << "device: cuda (auto)\n";
    return backend;
  } catch (const Error& e) {
    log << "device: cpu (auto; cuda not available: " << e.what() << ")\n";
  }
  return make_backend(BackendKind::cpu);
}

void print_error(const char* command, const std::string& message) {
  std::cerr << "step5attn " << command << ": error: " << message << "\n";
}

}  // namespace step5::tool
