#include "case/json.h"

#include <cstdio>

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

const Value* Value::find(const std::string& key) const {
  for (const auto& member : members) {
    if (member.first == key) return &member.second;
  }
  return nullptr;
}

bool Value::as_index(int64_t& out) const {
  if (type != Type::number || text.empty() || text.size() > 19) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > static_cast<uint64_t>(INT64_MAX)) return false;
  out = static_cast<int64_t>(v);
  return true;
}

namespace {

// Headers nest three levels; the bound only stops hostile input from
// exhausting the stack.
constexpr int kMaxDepth = 64;

class Parser {
 public:
  Parser(const char* text, size_t size, const std::string& what)
      : text_(text), size_(size), what_(what) {}

  Value document() {
    skip_space();
    Value v = value(0);
    skip_space();
    if (pos_ != size_) fail("unexpected data after the top-level value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    detail::fail(ErrorCode::io_error,
                 detail::concat(what_, ": bad JSON at offset ", pos_, ": ", why));
  }

  bool at_end() const { return pos_ >= size_; }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_space() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) {
      ++pos_;
    }
  }

  void expect(char c) {
    if (peek() != c || at_end()) fail(detail::concat("expected '", c, "'"));
    ++pos_;
  }

  void literal(const char* word) {
    for (const char* p = word; *p; ++p) {
      if (peek() != *p || at_end()) fail(detail::concat("expected '", word, "'"));
      ++pos_;
    }
  }

  Value value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than 64 levels");
    Value v;
    v.offset = pos_;
    if (at_end()) fail("unexpected end of text, expected a value");
    switch (peek()) {
      case '{': object(v, depth); break;
      case '[': array(v, depth); break;
      case '"':
        v.type = Type::string;
        v.text = string();
        break;
      case 't':
        literal("true");
        v.type = Type::boolean;
        v.boolean = true;
        break;
      case 'f':
        literal("false");
        v.type = Type::boolean;
        break;
      case 'n': literal("null"); break;
      default: number(v);
    }
    return v;
  }

  void object(Value& v, int depth) {
    v.type = Type::object;
    expect('{');
    skip_space();
    if (peek() == '}' && !at_end()) {
      ++pos_;
      return;
    }
    for (;;) {
      skip_space();
      if (peek() != '"' || at_end()) fail("expected a string key");
      size_t key_offset = pos_;
      std::string key = string();
      if (v.find(key) != nullptr) {
        pos_ = key_offset;
        fail("duplicate key " + quote(key));
      }
      skip_space();
      expect(':');
      skip_space();
      v.members.emplace_back(std::move(key), value(depth + 1));
      skip_space();
      if (peek() == ',' && !at_end()) {
        ++pos_;
        continue;
      }
      if (peek() != '}' || at_end()) fail("expected ',' or '}' in an object");
      ++pos_;
      return;
    }
  }

  void array(Value& v, int depth) {
    v.type = Type::array;
    expect('[');
    skip_space();
    if (peek() == ']' && !at_end()) {
      ++pos_;
      return;
    }
    for (;;) {
      skip_space();
      v.items.push_back(value(depth + 1));
      skip_space();
      if (peek() == ',' && !at_end()) {
        ++pos_;
        continue;
      }
      if (peek() != ']' || at_end()) fail("expected ',' or ']' in an array");
      ++pos_;
      return;
    }
  }

  void digits() {
    if (at_end() || peek() < '0' || peek() > '9') fail("expected a digit");
    while (!at_end() && peek() >= '0' && peek() <= '9') ++pos_;
  }

  void number(Value& v) {
    size_t begin = pos_;
    if (peek() == '-') ++pos_;
    if (at_end() || peek() < '0' || peek() > '9') {
      pos_ = begin;
      fail("expected a value");
    }
    if (peek() == '0') {
      ++pos_;
      if (!at_end() && peek() >= '0' && peek() <= '9') fail("leading zero in a number");
    } else {
      digits();
    }
    if (!at_end() && peek() == '.') {
      ++pos_;
      digits();
    }
    if (!at_end() && (peek() == 'e' || peek() == 'E')) {
      ++pos_;
      if (!at_end() && (peek() == '+' || peek() == '-')) ++pos_;
      digits();
    }
    v.type = Type::number;
    v.text.assign(text_ + begin, pos_ - begin);
  }

  unsigned hex4() {
    unsigned u = 0;
    for (int i = 0; i < 4; ++i) {
      char c = peek();
      unsigned d;
      if (at_end()) fail("unexpected end of text in a \\u escape");
      if (c >= '0' && c <= '9') {
        d = static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        d = static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        d = static_cast<unsigned>(c - 'A' + 10);
      } else {
        fail("expected a hex digit in a \\u escape");
      }
      u = u * 16 + d;
      ++pos_;
    }
    return u;
  }

  static void append_utf8(std::string& out, unsigned cp) {
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

  unsigned escape_code_point() {
    unsigned cp = hex4();
    if (cp >= 0xdc00 && cp <= 0xdfff) fail("unpaired low surrogate in a \\u escape");
    if (cp >= 0xd800 && cp <= 0xdbff) {
      if (peek() != '\\' || pos_ + 1 >= size_ || text_[pos_ + 1] != 'u') {
        fail("unpaired high surrogate in a \\u escape");
      }
      pos_ += 2;
      unsigned low = hex4();
      if (low < 0xdc00 || low > 0xdfff) fail("invalid low surrogate in a \\u escape");
      cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
    }
    return cp;
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (at_end()) fail("unterminated string");
      auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += static_cast<char>(c);
        ++pos_;
        continue;
      }
      ++pos_;
      if (at_end()) fail("unterminated escape");
      char e = text_[pos_++];
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
        default: --pos_; fail("invalid escape");
      }
    }
  }

  const char* text_;
  size_t size_;
  const std::string& what_;
  size_t pos_ = 0;
};

}  // namespace

Value parse(const char* text, size_t size, const std::string& what) {
  return Parser(text, size, what).document();
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

}  // namespace step5::json
