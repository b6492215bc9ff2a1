// Error messages are built without iostreams (core/check.h says why); they
// must read as an ostream would have written them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "core/check.h"

namespace step5 {
namespace {

template <class T>
std::string streamed(const T& value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

TEST(Messages, IntegersReadAsStreamed) {
  EXPECT_EQ(detail::concat(0), streamed(0));
  EXPECT_EQ(detail::concat(-17), streamed(-17));
  EXPECT_EQ(detail::concat(std::numeric_limits<int64_t>::min()),
            streamed(std::numeric_limits<int64_t>::min()));
  EXPECT_EQ(detail::concat(std::numeric_limits<uint64_t>::max()),
            streamed(std::numeric_limits<uint64_t>::max()));
  EXPECT_EQ(detail::concat(size_t{4096}, uint32_t{7}, int16_t{-3}), "40967-3");
}

TEST(Messages, FloatingPointReadsAsStreamed) {
  for (double v : {0.0, -0.0, 0.1, 1.0 / 3.0, -2.5, 1e-7, 123456789.0, 1e20, 6.103515625e-05,
                   std::numeric_limits<double>::infinity(),
                   -std::numeric_limits<double>::infinity(), std::nan("")}) {
    EXPECT_EQ(detail::concat(v), streamed(v)) << v;
    const auto f = static_cast<float>(v);
    EXPECT_EQ(detail::concat(f), streamed(f)) << f;
  }
}

TEST(Messages, TextAndCharsAreCopied) {
  const std::string s = "slot_mapping";
  EXPECT_EQ(detail::concat(s, "[", 3, "]: expected ", 'x', ", got ", std::string_view("y")),
            "slot_mapping[3]: expected x, got y");
  EXPECT_EQ(detail::concat(true, false), "10");
  EXPECT_EQ(detail::concat(), "");
}

TEST(Messages, ShapesPrintAsLists) {
  TensorView v;
  v.rank = 3;
  v.shape = {4, 8, 192};
  EXPECT_EQ(detail::shape_string(v), "[4, 8, 192]");
  v.rank = 0;
  EXPECT_EQ(detail::shape_string(v), "[]");
}

}  // namespace
}  // namespace step5
