// A small strict JSON parser (RFC 8259) for safetensors headers. Strict
// because a case file is an exchange format: anything a conforming writer
// would not produce (trailing commas, duplicate keys, leading zeros, control
// characters in strings) is rejected with the byte offset where it occurs,
// so a broken file is reported rather than half-read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace step5::json {

enum class Type : uint8_t { null, boolean, number, string, array, object };

const char* type_name(Type type);

struct Value {
  Type type = Type::null;
  size_t offset = 0;  // byte offset of the value in the parsed text
  bool boolean = false;
  std::string text;                                    // string: decoded UTF-8; number: its literal
  std::vector<Value> items;                            // array
  std::vector<std::pair<std::string, Value>> members;  // object, in file order

  // The member named `key`, or null when absent (objects only).
  const Value* find(const std::string& key) const;
  // A number literal that is a non-negative integer below 2^63; false for a
  // fraction, exponent, sign or overflow.
  bool as_index(int64_t& out) const;
};

// Parses one JSON value spanning `text[0, size)`, surrounded only by
// whitespace. Throws step5::Error(io_error, "<what>: bad JSON at offset N:
// ...") on any violation.
Value parse(const char* text, size_t size, const std::string& what);

// `s` as a JSON string literal, quotes included.
std::string quote(const std::string& s);

}  // namespace step5::json
