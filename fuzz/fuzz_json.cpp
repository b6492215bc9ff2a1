// libFuzzer target: the JSON reader on any bytes. Every input either reads
// as one JSON value or fails with step5::Error; nothing else may escape
// (a crash, a sanitizer report, another exception). Strings that read back
// must survive quote() and a second read unchanged.
#include <cstddef>
#include <cstdint>
#include <string>

#include "step5/error.h"
#include "step5/testing/json.h"

namespace {

using step5::json::Reader;
using step5::json::Type;

void check_string(const std::string& s) {
  if (!step5::json::valid_utf8(s)) __builtin_trap();
  const std::string quoted = step5::json::quote(s);
  Reader again(quoted.data(), quoted.size(), "quoted");
  if (again.string_value() != s) __builtin_trap();
  again.finish();
}

// A recursive walk with the pull API (bounded depth), checking strings.
void walk(Reader& r, int depth) {
  if (depth > 32) {
    r.skip_value(8);
    return;
  }
  std::string key;
  switch (r.peek()) {
    case Type::object:
      r.begin_object();
      while (r.next_key(key)) {
        check_string(key);
        walk(r, depth + 1);
      }
      break;
    case Type::array:
      r.begin_array();
      while (r.next_item()) walk(r, depth + 1);
      break;
    case Type::string: check_string(r.string_value()); break;
    case Type::number: {
      const std::string literal = r.number_value();
      int64_t index = 0;
      if (step5::json::parse_index(literal, index) && std::to_string(index) != literal) {
        __builtin_trap();
      }
      break;
    }
    case Type::boolean: r.boolean_value(); break;
    case Type::null: r.null_value(); break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* text = reinterpret_cast<const char*>(data);
  try {
    Reader r(text, size, "fuzz");
    walk(r, 0);
    r.finish();
  } catch (const step5::Error&) {
  }
  try {
    Reader r(text, size, "fuzz");
    r.skip_value();
    r.finish();
  } catch (const step5::Error&) {
  }
  return 0;
}
