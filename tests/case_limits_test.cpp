// Hostile and malformed case files (issue 9, item 6): every size a file
// claims is bounded before anything is allocated for it, resource use stays
// linear in the input, and nothing is accepted silently.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>

#include "step5/testing/case_file.h"
#include "step5/testing/safetensors.h"
#include "test_util.h"

namespace step5 {
namespace {

namespace st = safetensors;

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "step5_limits_" + name + ".safetensors";
}

// An 8-byte length, the header, then `data_bytes` zero bytes.
std::string raw_file(const std::string& header, size_t data_bytes = 0) {
  std::string image;
  for (size_t i = 0; i < 8; ++i) image += static_cast<char>(header.size() >> (8 * i));
  return image + header + std::string(data_bytes, '\0');
}

Error error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a step5::Error, got none";
  return Error(ErrorCode::device_error, "");
}

// A one-request CSA case: 12 history tokens and one 3-token step.
Case tiny_case(LayerConfig config = test::csa_config({2, 1, 16, 8}, 2)) {
  std::mt19937_64 rng(5);
  Case c;
  c.config = config;
  c.context_lens = {12};
  const size_t kv = 12 * static_cast<size_t>(config.num_kv_heads * config.head_size);
  c.context_key = test::random_bf16(rng, kv);
  c.context_value = test::random_bf16(rng, kv);
  if (config.kind == LayerKind::csa) {
    c.context_index_key = test::random_bf16(rng, 12 * static_cast<size_t>(config.index_dim));
    c.context_index_z.assign(12, 0.5f);
  }
  c.steps.push_back(sim::random_step(config, rng, {0}, {12}, {3}, true));
  return c;
}

// Saves `c`, edits the container, writes it back, and loads it.
Error load_error(const Case& c, const std::string& name,
                 const std::function<void(st::File&)>& mutate) {
  const std::string path = temp_path(name);
  save_case(path, c);
  st::File file = st::read_file(path);
  mutate(file);
  st::write_file(path, file);
  return error_of([&] { load_case(path); });
}

// Peak resident memory (VmHWM) in bytes after resetting it, or -1 where the
// kernel does not let a process reset it.
int64_t reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.close();
  return clear ? 0 : -1;
}

int64_t peak_rss() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

TEST(CaseLimits, StepCountIsBoundedByTheTensorsBeforeAnyAllocation) {
  EXPECT_ERROR(
      load_error(tiny_case(), "steps", [](st::File& f) { f.metadata["steps"] = "2147483647"; }),
      ErrorCode::io_error,
      "\"steps\": expected at most 1 (each step has at least 10 tensors and the file "
      "holds 16), got \"2147483647\"");
}

TEST(CaseLimits, ConfigBoundsHeadCounts) {
  LayerConfig c = test::csa_config({16, 2, 64, 16});
  c.num_heads = 8388608;
  EXPECT_ERROR(error_of([&] { validate_config(c); }), ErrorCode::invalid_argument,
               "config.num_heads: expected 1..1024, got 8388608");
  c.num_heads = 2048;
  c.num_kv_heads = 2048;
  EXPECT_ERROR(error_of([&] { validate_config(c); }), ErrorCode::invalid_argument,
               "config.num_heads: expected 1..1024, got 2048");
  c.num_heads = 1024;
  EXPECT_ERROR(error_of([&] { validate_config(c); }), ErrorCode::invalid_argument,
               "config.num_kv_heads: expected 1..1024, got 2048");
  c.num_kv_heads = 1024;
  validate_config(c);  // the largest accepted

  // The probe's file: H = 8388608 and empty tensors, refused at load.
  Case empty;
  empty.config = test::swa_config({1, 1, 256, 8}, 4);
  EXPECT_ERROR(
      load_error(empty, "huge_heads", [](st::File& f) { f.metadata["num_heads"] = "8388608"; }),
      ErrorCode::io_error, "config.num_heads: expected 1..1024, got 8388608");
}

TEST(CaseLimits, Fp8SummariesNeedIndexDimMultipleOf16) {
  LayerConfig c = test::csa_config({4, 2, 64, 16});
  c.index_dim = 8;
  EXPECT_ERROR(error_of([&] { validate_config(c); }), ErrorCode::invalid_argument,
               "config.index_dim: expected a multiple of 16 with fp8_e4m3 summaries");
  c.summary_dtype = DType::bf16;
  validate_config(c);  // 8 bf16 values fill 16 bytes
}

TEST(CaseLimits, ReplayRefusesACaseThatNeedsFarMoreMemoryThanItsSize) {
  // The probe's 464-byte header: H = G = 512, D = 256, B = 1024 and no
  // tokens; its session cache alone is 4 blocks of 512 MiB.
  Case c;
  c.config = test::swa_config({512, 512, 256, 1024}, 4);
  c.context_lens = {0};
  const std::string path = temp_path("big_blocks");
  save_case(path, c);
  const Case loaded = load_case(path);
  EXPECT_GT(replay_memory_bytes(loaded, false), 2e9);
  auto backend = test::cpu_backend();
  EXPECT_ERROR(error_of([&] { replay_case(*backend, loaded); }), ErrorCode::invalid_argument,
               "replay: the case needs about 2048");
  // A caller may raise the limit; small cases pass the default.
  ReplayOptions small;
  small.max_memory_bytes = 1;
  EXPECT_ERROR(error_of([&] { replay_case(*backend, tiny_case(), small); }),
               ErrorCode::invalid_argument, "expected at most");
  EXPECT_EQ(replay_case(*backend, tiny_case()).steps.size(), 1u);
}

TEST(CaseLimits, TrailingAndUncoveredDataBytesAreRejected) {
  const std::string one = R"({"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
  EXPECT_NO_THROW(st::parse(reinterpret_cast<const uint8_t*>(raw_file(one, 4).data()),
                            raw_file(one, 4).size(), "ok"));
  const std::string trailing = raw_file(one, 5);
  EXPECT_ERROR(error_of([&] {
                 st::parse(reinterpret_cast<const uint8_t*>(trailing.data()), trailing.size(), "t");
               }),
               ErrorCode::io_error, "1 trailing bytes are not covered by any tensor");
  const std::string gap = raw_file(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                                   R"("y":{"dtype":"U8","shape":[1],"data_offsets":[3,4]}})",
                                   4);
  EXPECT_ERROR(
      error_of([&] { st::parse(reinterpret_cast<const uint8_t*>(gap.data()), gap.size(), "g"); }),
      ErrorCode::io_error, "data bytes [2, 3) are not covered by any tensor");
}

TEST(CaseLimits, NonRegularAndOversizeFilesAreRefusedBeforeReading) {
  EXPECT_ERROR(error_of([] { load_case("/dev/zero"); }), ErrorCode::io_error,
               "/dev/zero: not a regular file");
  const std::string fifo = ::testing::TempDir() + "step5_limits_fifo";
  ::unlink(fifo.c_str());
  if (::mkfifo(fifo.c_str(), 0600) == 0) {  // must not wait for a writer
    EXPECT_ERROR(error_of([&] { load_case(fifo); }), ErrorCode::io_error, "not a regular file");
    ::unlink(fifo.c_str());
  }
  // A sparse file over the size limit: refused by its size, never read.
  const std::string big = temp_path("sparse");
  const int fd = ::open(big.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  const bool sized = ::ftruncate(fd, static_cast<off_t>(st::kMaxFileBytes + 1)) == 0;
  ::close(fd);
  if (sized) {
    EXPECT_ERROR(error_of([&] { load_case(big); }), ErrorCode::io_error,
                 "exceeds the limit of 17179869184 bytes");
  }
  ::unlink(big.c_str());
}

TEST(CaseLimits, HostileHeadersCostTimeAndMemoryLinearInTheirSize) {
  // 200k distinct metadata keys, then a duplicate: found in well under a
  // second (the old pairwise check took about a minute for 160k).
  std::string header = "{\"__metadata__\":{";
  for (int i = 0; i < 200000; ++i) header += "\"k" + std::to_string(i) + "\":\"v\",";
  header += "\"k7\":\"v\"}}";
  const std::string keys = raw_file(header);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_ERROR(error_of([&] {
                 st::parse(reinterpret_cast<const uint8_t*>(keys.data()), keys.size(), "keys");
               }),
               ErrorCode::io_error, "duplicate key \"k7\"");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 5.0);

  // 20 MB of JSON zeros: refused at the first value the schema cannot take,
  // without building a document (the old parser peaked at 1.75 GB).
  std::string zeros = "{\"x\":{\"shape\":[";
  while (zeros.size() < (size_t{20} << 20)) zeros += "0,";
  zeros += "0]}}";
  const std::string image = raw_file(zeros);
  const bool can_measure = reset_peak_rss() == 0;
  const int64_t before = peak_rss();
  EXPECT_ERROR(error_of([&] {
                 st::parse(reinterpret_cast<const uint8_t*>(image.data()), image.size(), "zeros");
               }),
               ErrorCode::io_error, "shape has more than 16 dimensions");
  if (can_measure && before > 0) {
    EXPECT_LT(peak_rss() - before, int64_t{64} << 20) << "peak RSS grew while parsing";
  }
  const std::string array = raw_file("[" + std::string(1000, '0') + "]");
  EXPECT_ERROR(error_of([&] {
                 st::parse(reinterpret_cast<const uint8_t*>(array.data()), array.size(), "a");
               }),
               ErrorCode::io_error, "header must be a JSON object, got array");
}

TEST(CaseLimits, UnknownMetadataKeysAreRejected) {
  EXPECT_ERROR(load_error(tiny_case(), "k_scal", [](st::File& f) { f.metadata["k_scal"] = "2"; }),
               ErrorCode::io_error, "unknown metadata key \"k_scal\" in a csa step5-case/1 file");
  EXPECT_ERROR(load_error(tiny_case(), "window", [](st::File& f) { f.metadata["window"] = "8"; }),
               ErrorCode::io_error, "unknown metadata key \"window\"");
}

TEST(CaseLimits, MetadataNumbersFollowTheJsonGrammar) {
  for (const char* bad : {"0x1p-3", "+0.5", "\r0.5", "\v0.5", " 0.5", "0.5 ", ".5", "5.", "1e",
                          "inf", "nan", "1e999", "00.5", "0.5f"}) {
    EXPECT_ERROR(load_error(tiny_case(), "float", [&](st::File& f) { f.metadata["scale"] = bad; }),
                 ErrorCode::io_error, "\"scale\": expected a finite decimal number");
  }
  for (const char* bad : {"+2", "02", "2.0", " 2", "0x2", "-"}) {
    EXPECT_ERROR(
        load_error(tiny_case(), "int", [&](st::File& f) { f.metadata["num_kv_heads"] = bad; }),
        ErrorCode::io_error, "\"num_kv_heads\": expected a decimal 32-bit integer");
  }
  const std::string path = temp_path("good_scale");
  save_case(path, tiny_case());
  st::File file = st::read_file(path);
  file.metadata["scale"] = "2.5E-1";
  st::write_file(path, file);
  EXPECT_EQ(load_case(path).config.scale, 0.25f);
}

TEST(CaseLimits, InvalidUtf8IsRejectedByTheReaderAndTheWriter) {
  for (const std::string bad :
       {"\xff", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"}) {
    const std::string image = raw_file("{\"__metadata__\":{\"a\":\"" + bad + "\"}}");
    EXPECT_ERROR(error_of([&] {
                   st::parse(reinterpret_cast<const uint8_t*>(image.data()), image.size(), "u");
                 }),
                 ErrorCode::io_error, "bad JSON at offset 22: invalid UTF-8 in a string");
  }
  const std::string ok =
      raw_file("{\"__metadata__\":{\"a\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}}");
  EXPECT_EQ(st::parse(reinterpret_cast<const uint8_t*>(ok.data()), ok.size(), "ok").metadata["a"],
            "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  st::File file;
  file.metadata["note"] = "a \"quoted\"\nline\\";
  const std::vector<uint8_t> bytes = st::serialize(file);
  EXPECT_EQ(st::parse(bytes, "escaped").metadata["note"], file.metadata["note"]);
  file.metadata["bad"] = "\xff";
  EXPECT_ERROR(error_of([&] { st::serialize(file); }), ErrorCode::invalid_argument,
               "metadata value \"\\u00ff\": expected valid UTF-8");
}

TEST(CaseLimits, NanInputsAreReportedAsMismatchesNeverUndefinedBehaviour) {
  auto backend = test::cpu_backend();
  Case c = tiny_case();
  c.context_index_z[3] = std::nanf("");
  ReplayOptions options;
  options.check = true;
  const CaseOutputs out = replay_case(*backend, c, options);
  ASSERT_EQ(out.checks.size(), 1u);
  EXPECT_FALSE(out.checks[0].ok);
  EXPECT_NE(out.checks[0].message.find("nan"), std::string::npos) << out.checks[0].message;

  Case inf = tiny_case();
  inf.steps[0].query[0] = 0x7f80;  // bf16 +infinity
  const CaseOutputs out_inf = replay_case(*backend, inf, options);
  EXPECT_FALSE(out_inf.checks[0].ok) << "an infinite input passed the check";
}

}  // namespace
}  // namespace step5
