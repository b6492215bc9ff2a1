#include "case/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "core/check.h"

namespace step5::json {

const char* type_name(Type type) {
  switch (type) {
    case Type::null: return "null";
    case Type::boolean: return "boolean";
    case Type::number: return "number";
    case Type::string: return "string";
    case Type::array: return "array";
    case Type::object: return "object";
  }
  return "?";
}

namespace {

bool in(unsigned char c, unsigned lo, unsigned hi) {
  return c >= lo && c <= hi;
}

// Length of the well-formed UTF-8 sequence at p (RFC 3629 table 3-7), or 0.
size_t utf8_length(const unsigned char* p, size_t avail) {
  const unsigned char b = p[0];
  if (b < 0x80) return 1;
  size_t len = 0;
  unsigned lo = 0x80, hi = 0xbf;  // range of the second byte
  if (in(b, 0xc2, 0xdf)) {
    len = 2;
  } else if (in(b, 0xe0, 0xef)) {
    len = 3;
    if (b == 0xe0) lo = 0xa0;
    if (b == 0xed) hi = 0x9f;  // no UTF-16 surrogates
  } else if (in(b, 0xf0, 0xf4)) {
    len = 4;
    if (b == 0xf0) lo = 0x90;
    if (b == 0xf4) hi = 0x8f;  // at most U+10FFFF
  } else {
    return 0;
  }
  if (avail < len || !in(p[1], lo, hi)) return 0;
  for (size_t i = 2; i < len; ++i) {
    if (!in(p[i], 0x80, 0xbf)) return 0;
  }
  return len;
}

void append_utf8(std::string& out, unsigned cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

}  // namespace

Reader::Reader(const char* text, size_t size, std::string what)
    : text_(text), size_(size), what_(std::move(what)) {}

void Reader::fail(size_t at, const std::string& why) const {
  detail::fail(ErrorCode::io_error, detail::concat(what_, ": bad JSON at offset ", at, ": ", why));
}

void Reader::skip_space() {
  while (!at_end()) {
    const char c = text_[pos_];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return;
    ++pos_;
  }
}

void Reader::expect(char c, const char* what) {
  if (at_end() || text_[pos_] != c) fail(pos_, detail::concat("expected ", what));
  ++pos_;
}

void Reader::literal(const char* word) {
  const size_t begin = pos_;
  for (const char* p = word; *p; ++p) {
    if (at_end() || text_[pos_] != *p) fail(begin, detail::concat("expected '", word, "'"));
    ++pos_;
  }
}

Type Reader::peek() {
  skip_space();
  if (at_end()) fail(pos_, "unexpected end of text, expected a value");
  const char c = text_[pos_];
  switch (c) {
    case '{': return Type::object;
    case '[': return Type::array;
    case '"': return Type::string;
    case 't':
    case 'f': return Type::boolean;
    case 'n': return Type::null;
    default:
      if (c == '-' || (c >= '0' && c <= '9')) return Type::number;
      fail(pos_, "expected a value");
  }
}

void Reader::begin_object() {
  skip_space();
  expect('{', "'{'");
  stack_.push_back(Frame{true, true, {}});
}

void Reader::begin_array() {
  skip_space();
  expect('[', "'['");
  stack_.push_back(Frame{false, true, {}});
}

bool Reader::next_in(bool object, char close) {
  if (stack_.empty() || stack_.back().object != object) {
    fail(pos_,
         object ? "internal: next_key outside an object" : "internal: next_item outside an array");
  }
  Frame& frame = stack_.back();
  skip_space();
  if (!at_end() && text_[pos_] == close) {
    ++pos_;
    stack_.pop_back();
    return false;
  }
  if (!frame.first) {
    if (at_end() || text_[pos_] != ',') {
      fail(pos_, object ? "expected ',' or '}' in an object" : "expected ',' or ']' in an array");
    }
    ++pos_;
    skip_space();
  }
  frame.first = false;
  return true;
}

bool Reader::next_key(std::string& key) {
  if (!next_in(true, '}')) return false;
  if (at_end() || text_[pos_] != '"') fail(pos_, "expected a string key");
  const size_t key_offset = pos_;
  key = string_value();
  if (!stack_.back().keys.insert(key).second) fail(key_offset, "duplicate key " + quote(key));
  skip_space();
  expect(':', "':' after a key");
  return true;
}

bool Reader::next_item() {
  return next_in(false, ']');
}

void Reader::digits() {
  if (at_end() || text_[pos_] < '0' || text_[pos_] > '9') fail(pos_, "expected a digit");
  while (!at_end() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
}

std::string Reader::number_value() {
  skip_space();
  const size_t begin = pos_;
  if (peek_char() == '-' && !at_end()) ++pos_;
  if (at_end() || text_[pos_] < '0' || text_[pos_] > '9') fail(begin, "expected a number");
  if (text_[pos_] == '0') {
    ++pos_;
    if (!at_end() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      fail(pos_, "leading zero in a number");
    }
  } else {
    digits();
  }
  if (!at_end() && text_[pos_] == '.') {
    ++pos_;
    digits();
  }
  if (!at_end() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
    ++pos_;
    if (!at_end() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
    digits();
  }
  return std::string(text_ + begin, pos_ - begin);
}

bool Reader::boolean_value() {
  skip_space();
  if (peek_char() == 't') {
    literal("true");
    return true;
  }
  literal("false");
  return false;
}

void Reader::null_value() {
  skip_space();
  literal("null");
}

unsigned Reader::hex4() {
  unsigned u = 0;
  for (int i = 0; i < 4; ++i) {
    if (at_end()) fail(pos_, "unexpected end of text in a \\u escape");
    const char c = text_[pos_];
    unsigned d = 0;
    if (c >= '0' && c <= '9') {
      d = static_cast<unsigned>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      d = static_cast<unsigned>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      d = static_cast<unsigned>(c - 'A' + 10);
    } else {
      fail(pos_, "expected a hex digit in a \\u escape");
    }
    u = u * 16 + d;
    ++pos_;
  }
  return u;
}

unsigned Reader::escape_code_point() {
  const size_t begin = pos_;
  unsigned cp = hex4();
  if (cp >= 0xdc00 && cp <= 0xdfff) fail(begin, "unpaired low surrogate in a \\u escape");
  if (cp >= 0xd800 && cp <= 0xdbff) {
    if (pos_ + 1 >= size_ || text_[pos_] != '\\' || text_[pos_ + 1] != 'u') {
      fail(pos_, "unpaired high surrogate in a \\u escape");
    }
    pos_ += 2;
    const size_t low_at = pos_;
    const unsigned low = hex4();
    if (low < 0xdc00 || low > 0xdfff) fail(low_at, "invalid low surrogate in a \\u escape");
    cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
  }
  return cp;
}

void Reader::utf8_sequence(std::string& out) {
  const auto* p = reinterpret_cast<const unsigned char*>(text_ + pos_);
  const size_t len = utf8_length(p, size_ - pos_);
  if (len == 0) fail(pos_, "invalid UTF-8 in a string");
  out.append(text_ + pos_, len);
  pos_ += len;
}

std::string Reader::string_value() {
  skip_space();
  expect('"', "a string");
  std::string out;
  for (;;) {
    if (at_end()) fail(pos_, "unterminated string");
    const auto c = static_cast<unsigned char>(text_[pos_]);
    if (c == '"') {
      ++pos_;
      return out;
    }
    if (c < 0x20) fail(pos_, "control character in a string");
    if (c >= 0x80) {
      utf8_sequence(out);
      continue;
    }
    if (c != '\\') {
      out += static_cast<char>(c);
      ++pos_;
      continue;
    }
    ++pos_;
    if (at_end()) fail(pos_, "unterminated escape");
    const char e = text_[pos_++];
    switch (e) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': append_utf8(out, escape_code_point()); break;
      default: fail(pos_ - 1, "invalid escape");
    }
  }
}

void Reader::skip_value(int max_depth) {
  // Iterative, so hostile nesting costs no stack; the depth bound keeps the
  // frame stack (and its key sets) small.
  const size_t base = stack_.size();
  std::string key;
  bool need_value = true;
  while (need_value || stack_.size() > base) {
    if (!need_value) {
      need_value = stack_.back().object ? next_key(key) : next_item();
      continue;
    }
    need_value = false;
    switch (peek()) {
      case Type::object:
      case Type::array:
        if (static_cast<int>(stack_.size() - base) >= max_depth) {
          fail(pos_, detail::concat("nesting deeper than ", max_depth, " levels"));
        }
        if (peek() == Type::object) {
          begin_object();
        } else {
          begin_array();
        }
        break;
      case Type::string: string_value(); break;
      case Type::number: number_value(); break;
      case Type::boolean: boolean_value(); break;
      case Type::null: null_value(); break;
    }
  }
}

void Reader::finish() {
  skip_space();
  if (!at_end()) fail(pos_, "unexpected data after the top-level value");
}

bool parse_index(const std::string& literal, int64_t& out) {
  if (literal.empty() || literal.size() > 19 || (literal[0] == '0' && literal.size() > 1)) {
    return false;
  }
  uint64_t v = 0;
  for (char c : literal) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > static_cast<uint64_t>(INT64_MAX)) return false;
  out = static_cast<int64_t>(v);
  return true;
}

bool valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_length(p + i, s.size() - i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = p[i];
    const size_t len = utf8_length(p + i, s.size() - i);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || len == 0) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out.append(s, i, len);
      i += len;
      continue;
    }
    ++i;
  }
  return out + "\"";
}

std::string number(double x) {
  if (!std::isfinite(x)) return "null";
  char buf[32];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

}  // namespace step5::json
