// A small strict JSON reader (RFC 8259) for safetensors headers, and the
// string and number writers of the project's JSON output. Part of the
// testing library (step5::testing, src/case/json.cpp).
//
// The reader is a pull parser: the caller asks for the value it expects
// next (an object's keys, a string, a number), so a header is read against
// its schema as it goes and nothing but what the caller keeps is allocated.
// Anything a conforming writer would not produce (trailing commas,
// duplicate keys, leading zeros, control characters or invalid UTF-8 in
// strings) is rejected with the byte offset where it occurs, so a broken
// file is reported rather than half-read. Duplicate keys are found with one
// ordered set per open object: O(k log k) for k keys.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace step5::json {

enum class Type : uint8_t { null, boolean, number, string, array, object };

const char* type_name(Type type);

class Reader {
 public:
  // Reads `text[0, size)`; `what` names the text in messages.
  Reader(const char* text, size_t size, std::string what);

  // The type of the next value, from its first character (whitespace
  // skipped); fails on a character that starts no JSON value.
  Type peek();
  // Byte offset of the next unread character.
  size_t offset() const { return pos_; }

  // Objects: begin_object(), then next_key() until it returns false; after
  // each key the caller reads (or skips) exactly one value.
  void begin_object();
  bool next_key(std::string& key);
  // Arrays: begin_array(), then next_item() until false, one value each.
  void begin_array();
  bool next_item();

  std::string string_value();
  // A number, checked against the JSON grammar; returns its literal text.
  std::string number_value();
  bool boolean_value();
  void null_value();
  // Reads and drops one value of any type, nesting at most `max_depth`.
  void skip_value(int max_depth = 64);
  // Only whitespace may follow the top-level value.
  void finish();

  // Throws step5::Error(io_error, "<what>: bad JSON at offset N: <why>").
  [[noreturn]] void fail(size_t at, const std::string& why) const;

 private:
  struct Frame {
    bool object = false;
    bool first = true;
    std::set<std::string> keys;  // object keys seen so far
  };

  bool at_end() const { return pos_ >= size_; }
  char peek_char() const { return at_end() ? '\0' : text_[pos_]; }
  void skip_space();
  void expect(char c, const char* what);
  void literal(const char* word);
  // Before a value inside a container: the separating comma.
  bool next_in(bool object, char close);
  void digits();
  unsigned hex4();
  unsigned escape_code_point();
  void utf8_sequence(std::string& out);

  const char* text_;
  size_t size_;
  std::string what_;
  size_t pos_ = 0;
  std::vector<Frame> stack_;
};

// A number literal that is a non-negative integer below 2^63; false for a
// fraction, exponent, sign or overflow.
bool parse_index(const std::string& literal, int64_t& out);

// Whether `s` is well-formed UTF-8 (no overlong forms, no surrogates, at
// most U+10FFFF).
bool valid_utf8(const std::string& s);

// `s` as a JSON string literal, quotes included: '"', '\\' and control
// characters escaped. Bytes that are not well-formed UTF-8 are written as
// \u00XX escapes of their byte value, so the output is always valid JSON
// (such strings are never produced by the reader; the escape keeps a
// message or a report readable).
std::string quote(const std::string& s);

// `x` as a JSON number (shortest round trip of a double), or null when it
// is not finite: JSON has no NaN or infinity.
std::string number(double x);

}  // namespace step5::json
