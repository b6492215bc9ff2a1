// step5-case/1 files (SPEC 10): the safetensors container, the case model's
// validation, the replayer and its outputs.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "step5/testing/case_file.h"
#include "step5/testing/safetensors.h"
#include "test_util.h"

namespace step5 {
namespace {

namespace st = safetensors;

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "step5_case_" + name + ".safetensors";
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> raw_file(const std::string& header, size_t data_bytes = 0) {
  std::string image;
  for (size_t i = 0; i < 8; ++i) image += static_cast<char>(header.size() >> (8 * i));
  image += header;
  image.append(data_bytes, '\0');
  return {image.begin(), image.end()};
}

// Three requests (histories of 40, 0 and 17 tokens), MTP k = 3: a verify
// step, then a step that rewrites rejected drafts of request 2 beside a
// prefill of request 1, then a decode-sized verify of request 1.
Case small_case(LayerKind kind) {
  test::Shape shape;
  shape.head_size = 32;
  shape.block_size = 16;
  Case c;
  c.config = kind == LayerKind::csa ? test::csa_config(shape, 4, 3)
                                    : test::swa_config(shape, 24, 3, DType::fp8_e4m3);
  std::mt19937_64 rng(11);
  c.context_lens = {40, 0, 17};
  const auto rows = static_cast<size_t>(c.context_rows());
  const auto kv = rows * static_cast<size_t>(c.config.num_kv_heads * c.config.head_size);
  c.context_key = test::random_bf16(rng, kv);
  c.context_value = test::random_bf16(rng, kv);
  if (kind == LayerKind::csa) {
    c.context_index_key = test::random_bf16(rng, rows * static_cast<size_t>(c.config.index_dim));
    c.context_index_z.assign(rows, 0.25f);
    for (size_t i = 0; i < rows; ++i) c.context_index_z[i] = static_cast<float>(i % 5) - 2.0f;
  }
  c.steps.push_back(sim::random_step(c.config, rng, {0, 2}, {40, 17}, {4, 4}, true));
  c.steps.push_back(sim::random_step(c.config, rng, {2, 1, 0}, {18, 0, 44}, {4, 30, 4}, false));
  c.steps.push_back(sim::random_step(c.config, rng, {1}, {30}, {4}, true));
  return c;
}

// Saves `c`, lets `mutate` edit the container, writes it back and returns
// load_case's error (or fails when it loads).
template <class Mutate>
Error load_error(const Case& c, const std::string& name, Mutate mutate) {
  const std::string path = temp_path(name);
  save_case(path, c);
  st::File file = st::read_file(path);
  mutate(file);
  st::write_file(path, file);
  try {
    load_case(path);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << name << ": load_case accepted the file";
  return Error(ErrorCode::invalid_argument, "");
}

Error raw_error(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = temp_path(name);
  write_bytes(path, bytes);
  try {
    load_case(path);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << name << ": load_case accepted the file";
  return Error(ErrorCode::invalid_argument, "");
}

TEST(CaseFile, RoundTripIsByteIdentical) {
  for (LayerKind kind : {LayerKind::csa, LayerKind::swa}) {
    const Case c = small_case(kind);
    const std::string a = temp_path("roundtrip_a"), b = temp_path("roundtrip_b");
    save_case(a, c);
    const Case loaded = load_case(a);
    save_case(b, loaded);
    EXPECT_EQ(read_bytes(a), read_bytes(b)) << layer_kind_name(kind);
    EXPECT_EQ(describe(loaded.config), describe(c.config));
    EXPECT_EQ(loaded.context_lens, c.context_lens);
    EXPECT_EQ(loaded.context_key, c.context_key);
    EXPECT_EQ(loaded.context_index_z, c.context_index_z);
    ASSERT_EQ(loaded.steps.size(), c.steps.size());
    for (size_t s = 0; s < c.steps.size(); ++s) {
      EXPECT_EQ(loaded.steps[s].seq_lens, c.steps[s].seq_lens);
      EXPECT_EQ(loaded.steps[s].query, c.steps[s].query);
      EXPECT_EQ(loaded.steps[s].index_query, c.steps[s].index_query);
      EXPECT_EQ(loaded.steps[s].gate, c.steps[s].gate);
    }
  }
}

TEST(CaseFile, ReplayOnCpuMatchesOracle) {
  auto backend = test::cpu_backend();
  for (LayerKind kind : {LayerKind::csa, LayerKind::swa}) {
    const Case c = small_case(kind);
    ReplayOptions options;
    options.check = true;
    size_t called = 0;
    options.on_step = [&](size_t, const sim::StepOutput&, const sim::CheckResult* check) {
      ASSERT_NE(check, nullptr);
      ++called;
    };
    const CaseOutputs out = replay_case(*backend, c, options);
    EXPECT_EQ(called, c.steps.size());
    ASSERT_EQ(out.checks.size(), c.steps.size());
    for (size_t s = 0; s < out.checks.size(); ++s) {
      EXPECT_TRUE(out.checks[s].ok)
          << layer_kind_name(kind) << " step " << s << ": " << out.checks[s].message;
    }
    // The outputs file reads back as written.
    const std::string path = temp_path("outputs");
    save_case_outputs(path, c, out);
    const CaseOutputs back = load_case_outputs(path, c);
    ASSERT_EQ(back.steps.size(), out.steps.size());
    for (size_t s = 0; s < out.steps.size(); ++s) {
      const auto rows =
          static_cast<size_t>(c.steps[s].num_tokens() * c.config.num_heads * c.config.head_size);
      EXPECT_EQ(back.steps[s].output,
                std::vector<uint16_t>(out.steps[s].output.begin(),
                                      out.steps[s].output.begin() + static_cast<long>(rows)));
      EXPECT_EQ(back.steps[s].selected, out.steps[s].selected);
      EXPECT_EQ(back.steps[s].summary, out.steps[s].summary);
    }
    EXPECT_ERROR(raw_error("outputs_as_case", read_bytes(path)), ErrorCode::io_error, "outputs");
  }
}

TEST(CaseFile, ContainerErrorsNameTheProblem) {
  EXPECT_ERROR(raw_error("short", {1, 2, 3}), ErrorCode::io_error, "truncated header");
  std::vector<uint8_t> cut = raw_file("{\"__metadata__\":{}}");
  cut.resize(cut.size() - 3);
  EXPECT_ERROR(raw_error("cut", cut), ErrorCode::io_error, "truncated header");
  EXPECT_ERROR(raw_error("json", raw_file("{\"a\":}")), ErrorCode::io_error,
               "bad JSON at offset 5");
  EXPECT_ERROR(raw_error("comma", raw_file("{\"__metadata__\":{},}")), ErrorCode::io_error,
               "bad JSON at offset 19");
  EXPECT_ERROR(raw_error("dtype", raw_file(R"({"x":{"dtype":"F16","shape":[2],)"
                                           R"("data_offsets":[0,4]}})",
                                           4)),
               ErrorCode::io_error, "unknown dtype \"F16\"");
  EXPECT_ERROR(raw_error("range", raw_file(R"({"x":{"dtype":"I32","shape":[2],)"
                                           R"("data_offsets":[0,8]}})",
                                           4)),
               ErrorCode::io_error, "out of range");
  EXPECT_ERROR(raw_error("size", raw_file(R"({"x":{"dtype":"I32","shape":[3],)"
                                          R"("data_offsets":[0,8]}})",
                                          8)),
               ErrorCode::io_error, "needs 12 bytes");
  EXPECT_ERROR(raw_error("overlap", raw_file(R"({"x":{"dtype":"I32","shape":[2],"data_offsets":)"
                                             R"([0,8]},"y":{"dtype":"U8","shape":[4],)"
                                             R"("data_offsets":[4,8]}})",
                                             8)),
               ErrorCode::io_error, "overlap");
  EXPECT_ERROR(raw_error("missing", {}), ErrorCode::io_error, "truncated header");
  try {
    load_case(temp_path("does_not_exist"));
    ADD_FAILURE() << "loaded a missing file";
  } catch (const Error& e) {
    EXPECT_ERROR(e, ErrorCode::io_error, "no such file");
  }
}

TEST(CaseFile, CaseErrorsNameTheProblem) {
  const Case c = small_case(LayerKind::csa);
  EXPECT_ERROR(load_error(c, "wrong_dtype",
                          [](st::File& f) { f.tensors["step1.seq_lens"].dtype = st::DType::f32; }),
               ErrorCode::io_error, "\"step1.seq_lens\": dtype expected I32, got F32");
  EXPECT_ERROR(load_error(c, "wrong_shape",
                          [](st::File& f) {
                            st::Tensor& t = f.tensors["context.index_z"];
                            t.shape = {1, t.shape[0]};
                          }),
               ErrorCode::io_error, "\"context.index_z\": shape expected [57], got [1, 57]");
  EXPECT_ERROR(load_error(c, "missing_tensor", [](st::File& f) { f.tensors.erase("step2.query"); }),
               ErrorCode::io_error, "missing tensor \"step2.query\"");
  EXPECT_ERROR(load_error(c, "extra_tensor",
                          [](st::File& f) { f.tensors["step0.gat"] = f.tensors["step0.gate"]; }),
               ErrorCode::io_error, "unexpected tensor \"step0.gat\"");
  EXPECT_ERROR(load_error(c, "format", [](st::File& f) { f.metadata["format"] = "step5-case/2"; }),
               ErrorCode::io_error, "\"format\": expected step5-case/1, got \"step5-case/2\"");
  EXPECT_ERROR(load_error(c, "missing_meta", [](st::File& f) { f.metadata.erase("topk"); }),
               ErrorCode::io_error, "missing metadata \"topk\"");
  EXPECT_ERROR(load_error(c, "bad_int", [](st::File& f) { f.metadata["num_heads"] = "16x"; }),
               ErrorCode::io_error, "\"num_heads\": expected a decimal 32-bit integer");
  EXPECT_ERROR(load_error(c, "bad_config", [](st::File& f) { f.metadata["num_kv_heads"] = "3"; }),
               ErrorCode::io_error, "num_heads");
  EXPECT_ERROR(load_error(c, "qsl",
                          [](st::File& f) {
                            std::vector<int32_t> q = {0, 5, 4, 8};
                            f.tensors.erase("step1.query_start_loc");
                            f.add("step1.query_start_loc", st::DType::i32, {4}, q.data(), q.size());
                          }),
               ErrorCode::io_error, "step1.query_start_loc[2]: expected >= 5");
  // Step 0 request 2 starts at 17 + 3 = 20, above the 17 tokens it holds.
  EXPECT_ERROR(load_error(c, "start_above",
                          [](st::File& f) {
                            std::vector<int32_t> lens = {44, 24};
                            f.tensors.erase("step0.seq_lens");
                            f.add("step0.seq_lens", st::DType::i32, {2}, lens.data(), lens.size());
                          }),
               ErrorCode::io_error, "request 2 starts at position 20");
  EXPECT_ERROR(load_error(c, "duplicate",
                          [](st::File& f) {
                            std::vector<int32_t> ids = {0, 0};
                            f.tensors.erase("step0.request");
                            f.add("step0.request", st::DType::i32, {2}, ids.data(), ids.size());
                          }),
               ErrorCode::io_error, "distinct request ids");

  // The same rules guard cases built in memory.
  Case bad = c;
  bad.steps[2].seq_lens[0] += 1;
  try {
    validate_case(bad);
    ADD_FAILURE() << "accepted a step above the held length";
  } catch (const Error& e) {
    EXPECT_ERROR(e, ErrorCode::invalid_argument, "step2.seq_lens[0]: request 1 starts at");
  }
}

}  // namespace
}  // namespace step5
