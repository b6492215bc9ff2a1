// Error messages are built without iostreams (src/core/check.h says why);
// through the public API they must read as an ostream would have written
// them: integers in decimal, floating point as %g, shapes as lists.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "step5/attention.h"
#include "step5/config.h"
#include "test_util.h"

namespace step5 {
namespace {

template <class T>
std::string streamed(const T& value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

LayerConfig fp8_config() {
  return test::csa_config({4, 2, 64, 16}, 4, 0, DType::fp8_e4m3);
}

std::string error_of(const LayerConfig& c) {
  try {
    validate_config(c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Messages, FloatingPointReadsAsStreamed) {
  for (float v :
       {-2.5f, 0.0f, -0.0f, -1e-7f, -123456789.0f, std::nanf(""),
        std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
    LayerConfig c = fp8_config();
    c.k_scale = v;
    EXPECT_EQ(error_of(c), "config.k_scale: expected a finite value > 0, got " + streamed(v));
  }
  for (float v : {0.1f, 1.0f / 3.0f, 1e-7f, 1e20f, 6.103515625e-05f, 448.0f}) {
    LayerConfig c = fp8_config();
    c.k_scale = v;
    const std::string text = describe(c);
    EXPECT_NE(text.find(" k_scale=" + streamed(v) + " "), std::string::npos) << text;
  }
}

TEST(Messages, IntegersReadAsStreamed) {
  for (int b : {12, -8, 0, 2048, std::numeric_limits<int>::min()}) {
    LayerConfig c = fp8_config();
    c.block_size = b;
    EXPECT_EQ(error_of(c),
              "config.block_size: expected a multiple of 8 in 8..1024, got " + streamed(b));
  }
}

TEST(Messages, ShapesPrintAsLists) {
  const LayerConfig c = fp8_config();
  std::vector<int64_t> slots(3, 0);
  std::vector<uint16_t> rows(3 * 2 * 64);
  const TensorView slot_mapping = TensorView::contiguous(slots.data(), DType::i64, {3});
  const TensorView key = TensorView::contiguous(rows.data(), DType::bf16, {3, 1, 128});
  const auto backend = make_backend(BackendKind::cpu);
  try {
    backend->write_kv(c, slot_mapping, key, key, KVCacheView{}, nullptr);
    ADD_FAILURE() << "a key of the wrong shape was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(shape [3, 1, 128])"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace step5
