// The JSON reader's strictness and the JSON the project writes: strings
// escaped (quotes, backslashes, control characters, invalid UTF-8) and
// numbers that are not finite written as null, in the safetensors writer
// and in the bench's --json report.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <string>

#include "step5/error.h"
#include "step5/testing/json.h"
#include "step5attn/bench_result.h"

namespace step5 {
namespace {

// Reads `text` as one JSON value; the error message, or "" when valid.
std::string json_error(const std::string& text) {
  try {
    json::Reader r(text.data(), text.size(), "t");
    r.skip_value();
    r.finish();
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(Json, ReaderIsStrict) {
  EXPECT_EQ(json_error(R"({"a":[1,-0.5e+3,"x\u00e9\ud83d\ude00",true,null,{}]})"), "");
  EXPECT_NE(json_error("[1,]").find("offset 3: expected a value"), std::string::npos);
  EXPECT_NE(json_error("{\"a\":1,}").find("expected a string key"), std::string::npos);
  EXPECT_NE(json_error("{\"a\":1,\"a\":2}").find("offset 7: duplicate key \"a\""),
            std::string::npos);
  EXPECT_NE(json_error("[01]").find("leading zero"), std::string::npos);
  EXPECT_NE(json_error("[+1]").find("expected a value"), std::string::npos);
  EXPECT_NE(json_error("\"\\ud800\"").find("unpaired high surrogate"), std::string::npos);
  EXPECT_NE(json_error("\"\xc0\xaf\"").find("invalid UTF-8"), std::string::npos);
  EXPECT_NE(json_error("\"a\x01\"").find("control character"), std::string::npos);
  EXPECT_NE(json_error(std::string(100, '[') + std::string(100, ']')).find("nesting deeper"),
            std::string::npos);
  EXPECT_NE(json_error("1 2").find("unexpected data after the top-level value"), std::string::npos);
}

TEST(Json, WriterEscapesStringsAndNonFiniteNumbers) {
  EXPECT_EQ(json::quote("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\u000a\\u0001\"");
  EXPECT_EQ(json::quote("\xc3\xa9"), "\"\xc3\xa9\"");  // valid UTF-8 kept
  EXPECT_EQ(json::quote("x\xff"), "\"x\\u00ff\"");     // invalid byte escaped
  EXPECT_EQ(json::number(0.25), "0.25");
  EXPECT_EQ(json::number(std::nan("")), "null");
  EXPECT_EQ(json::number(-INFINITY), "null");
  for (double x : {0.1, 1.0 / 3.0, 4.27e12, -1e-300}) {
    EXPECT_EQ(std::strtod(json::number(x).c_str(), nullptr), x) << json::number(x);
  }
}

// The bench report of one row, as written to a file and read back.
std::string bench_report(const std::string& name, const std::string& gpu,
                         const tool::bench::Result& r, const tool::bench::MeasuredCopy& copy) {
  const std::string path = ::testing::TempDir() + name;
  tool::bench::write_json(path, gpu, "2026-01-01", "", {r}, 0, copy);
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A decode row of the independent regime with 1 GB of traffic.
tool::bench::Result decode_row(const std::string& op, const std::string& layer,
                               const std::string& kv, double ms) {
  tool::bench::Result r;
  r.op = op;
  r.layer = layer;
  r.kv = kv;
  r.phase = "decode";
  r.regime = "independent";
  r.ms = ms;
  r.bytes = 1e9;
  return r;
}

TEST(Json, BenchReportIsValidJsonWhateverItsStrings) {
  // NaN ms: a shape that could not be timed.
  const tool::bench::Result r =
      decode_row("attention \"quoted\"", "csa\nswa", "bf16\\", std::nan(""));
  const std::string text = bench_report("step5_bench.json", "NVIDIA \"H200\"\t", r,
                                        tool::bench::MeasuredCopy{std::nan(""), 0});
  EXPECT_EQ(json_error(text), "") << text;
  EXPECT_NE(text.find("\"ms\": null"), std::string::npos) << text;
  EXPECT_NE(text.find("\"gpu\": \"NVIDIA \\\"H200\\\"\\u0009\""), std::string::npos) << text;
}

TEST(Json, BenchReportRowsAgainstTheMeasuredCopy) {
  tool::bench::Result r = decode_row("layer", "csa", "bf16", 2.0);
  r.floor_bytes = 5e8;
  const std::string text = bench_report("step5_bench_copy.json", "GPU", r,
                                        tool::bench::MeasuredCopy{2e12, size_t{256} << 20});
  EXPECT_EQ(json_error(text), "") << text;
  EXPECT_NE(text.find("\"buffer_bytes\": 268435456"), std::string::npos) << text;
  // 1e9 bytes in 2 ms against 2e12 bytes/s; the floor half of that.
  EXPECT_NE(text.find("\"frac_measured_copy\": 0.25"), std::string::npos) << text;
  EXPECT_NE(text.find("\"floor_over_time_measured\": 0.125"), std::string::npos) << text;
}

}  // namespace
}  // namespace step5
