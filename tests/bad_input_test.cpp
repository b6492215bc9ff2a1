// Bad input at the API boundary: every kind raises its own ErrorCode with a
// message naming the argument, and a failing forward leaves the output as
// it was (still poisoned).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "step5/testing/device_memory.h"
#include "test_util.h"

namespace step5 {
namespace {

using sim::DeviceBuffer;

void expect_error(const std::function<void()>& call, ErrorCode code, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "expected " << error_code_name(code) << " containing '" << needle
                  << "', got no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message '" << e.what() << "' lacks '" << needle << "'";
  }
}

// A valid one-request CSA prefill of 20 tokens on the host, built by hand
// so each test can break exactly one thing.
struct HostStep {
  LayerConfig c = test::csa_config({4, 2, 64, 16}, 4);
  std::unique_ptr<Backend> backend = test::cpu_backend();
  static constexpr int32_t n = 20;
  std::vector<int32_t> qsl{0, n}, lens{n}, table{3, 1, 2, 0}, ring_index{0};
  std::vector<int64_t> slots;
  std::vector<uint16_t> query, key, value, index_query, index_key, gate;
  std::vector<float> index_weight, index_z;
  DeviceBuffer cache, ring, output;
  LayerCache views;
  StepDesc desc;
  CsaInputs in;
  LayerOutputs out;

  HostStep() {
    std::mt19937_64 rng(51);
    for (int32_t p = 0; p < n; ++p) slots.push_back(table[p / 16] * 16 + p % 16);
    const auto un = static_cast<size_t>(n);
    query = test::random_bf16(rng, un * 4 * 64);
    key = test::random_bf16(rng, un * 2 * 64);
    value = test::random_bf16(rng, un * 2 * 64);
    index_query = test::random_bf16(rng, un * 2 * 2 * 32);
    index_key = test::random_bf16(rng, un * 32);
    gate = test::random_bf16(rng, un * 4);
    index_weight.assign(un * 4, 0.5f);
    index_z.assign(un, 0.25f);
    cache = DeviceBuffer(Device::host, cache_bytes_per_block(c) * 5);
    ring = DeviceBuffer(Device::host, ring_entry_bytes(c));
    views = packed_layer_cache(c, cache.data(), 5, static_cast<int64_t>(cache_bytes_per_block(c)),
                               ring.data(), 1, Device::host);
    output = DeviceBuffer(Device::host, un * 4 * 64 * 2);
    output.fill(0xff);
    desc.num_tokens = n;
    desc.num_requests = 1;
    desc.query_start_loc = TensorView::contiguous(qsl.data(), DType::i32, {2});
    desc.seq_lens = TensorView::contiguous(lens.data(), DType::i32, {1});
    desc.block_table = TensorView::contiguous(table.data(), DType::i32, {1, 4});
    desc.slot_mapping = TensorView::contiguous(slots.data(), DType::i64, {n});
    desc.ring_index = TensorView::contiguous(ring_index.data(), DType::i32, {1});
    in.query = TensorView::contiguous(query.data(), DType::bf16, {n, 4, 64});
    in.key = TensorView::contiguous(key.data(), DType::bf16, {n, 2, 64});
    in.value = TensorView::contiguous(value.data(), DType::bf16, {n, 2, 64});
    in.index_query = TensorView::contiguous(index_query.data(), DType::bf16, {n, 2, 2, 32});
    in.index_weight = TensorView::contiguous(index_weight.data(), DType::f32, {n, 2, 2});
    in.index_key = TensorView::contiguous(index_key.data(), DType::bf16, {n, 32});
    in.index_z = TensorView::contiguous(index_z.data(), DType::f32, {n});
    in.gate = TensorView::contiguous(gate.data(), DType::bf16, {n, 4});
    out.output = TensorView::contiguous(output.data(), DType::bf16, {n, 4, 64});
  }

  StepPlan plan() const { return backend->plan(desc, {c}); }

  // Plans, then runs forward_csa with a workspace of the planned size plus
  // `workspace_delta` bytes.
  void forward(int64_t workspace_delta = 0) {
    const StepPlan p = plan();
    DeviceBuffer ws(Device::host, p.workspace_bytes());
    const auto bytes =
        static_cast<size_t>(static_cast<int64_t>(p.workspace_bytes()) + workspace_delta);
    backend->prepare_step(p, {ws.data(), p.workspace_bytes()}, nullptr);
    backend->forward_csa(c, desc, p, in, views, out, {ws.data(), bytes}, nullptr);
  }

  bool output_untouched() const {
    const std::vector<uint8_t> bytes = output.to_vector<uint8_t>(output.bytes());
    return std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0xff; });
  }

  // forward() must fail with `code` and `needle` and leave the output alone.
  void expect_forward_error(ErrorCode code, const std::string& needle) {
    expect_error([&] { forward(); }, code, needle);
    EXPECT_TRUE(output_untouched()) << "a failing forward wrote its output (" << needle << ")";
  }
};

TEST(BadInput, TheValidStepRuns) {
  HostStep s;
  EXPECT_NO_THROW(s.forward());
  EXPECT_FALSE(s.output_untouched())
      << "the fixture must be valid for the other tests to mean much";
}

TEST(BadInput, WrongShape) {
  HostStep s;
  s.in.query.shape[1] = 5;
  s.expect_forward_error(ErrorCode::invalid_argument, "query: dim 1 expected 4, got 5");
  HostStep t;
  t.in.index_key.shape[0] = 19;
  t.expect_forward_error(ErrorCode::invalid_argument, "index_key: dim 0 expected >= 20");
}

TEST(BadInput, WrongDtype) {
  HostStep s;
  s.in.index_weight.dtype = DType::bf16;
  s.expect_forward_error(ErrorCode::invalid_argument, "index_weight: dtype expected f32, got bf16");
}

TEST(BadInput, InnermostStrideNotContiguous) {
  HostStep s;
  s.in.value.stride = {2 * 64 * 2, 64 * 2, 2, 0};
  s.expect_forward_error(ErrorCode::invalid_argument, "value: innermost stride expected 1, got 2");
}

TEST(BadInput, HeadCounts) {
  HostStep s;
  s.c.num_heads = 3;
  expect_error([&] { s.plan(); }, ErrorCode::invalid_argument,
               "config.num_heads: expected a multiple of num_kv_heads");
}

TEST(BadInput, EachConfigFieldIsNamed) {
  const std::pair<std::function<void(LayerConfig&)>, const char*> cases[] = {
      {[](LayerConfig& c) { c.num_kv_heads = 0; }, "config.num_kv_heads"},
      {[](LayerConfig& c) { c.head_size = 100; }, "config.head_size"},
      {[](LayerConfig& c) { c.head_size = 264; }, "config.head_size"},
      {[](LayerConfig& c) { c.block_size = 12; }, "config.block_size"},
      {[](LayerConfig& c) { c.kv_dtype = DType::f32; }, "config.kv_dtype"},
      {[](LayerConfig& c) { c.k_scale = 0.0f; }, "config.k_scale"},
      {[](LayerConfig& c) { c.v_scale = std::nanf(""); }, "config.v_scale"},
      {[](LayerConfig& c) { c.scale = -1.0f; }, "config.scale"},
      {[](LayerConfig& c) { c.spec_tokens = -1; }, "config.spec_tokens"},
      {[](LayerConfig& c) { c.index_heads = 0; }, "config.index_heads"},
      {[](LayerConfig& c) { c.index_dim = 12; }, "config.index_dim"},
      {[](LayerConfig& c) { c.topk = 0; }, "config.topk"},
      {[](LayerConfig& c) { c.summary_dtype = DType::i32; }, "config.summary_dtype"},
      {[](LayerConfig& c) { c.kind = LayerKind::swa, c.window = 0; }, "config.window"},
  };
  for (const auto& [mutate, field] : cases) {
    HostStep s;
    mutate(s.c);
    expect_error([&] { validate_config(s.c); }, ErrorCode::invalid_argument, field);
    expect_error([&] { s.plan(); }, ErrorCode::invalid_argument, field);
  }
}

TEST(BadInput, BlockIdOutOfRange) {
  HostStep s;
  s.table[1] = 9;  // the cache has 5 blocks; keep the slots consistent
  for (int32_t p = 16; p < HostStep::n; ++p) s.slots[static_cast<size_t>(p)] = 9 * 16 + p % 16;
  s.expect_forward_error(ErrorCode::out_of_range, "step.block_table[0][1]: block id expected 0..4");
}

TEST(BadInput, SequenceLongerThanItsBlockTable) {
  HostStep s;
  s.desc.block_table.shape[1] = 1;  // 16 tokens of room for 20
  expect_error([&] { s.plan(); }, ErrorCode::out_of_range, "longer than its block table");
}

TEST(BadInput, SlotMappingInconsistent) {
  HostStep s;
  s.slots[17] = s.slots[16];
  expect_error([&] { s.plan(); }, ErrorCode::invalid_argument, "step.slot_mapping[17]");
}

TEST(BadInput, RingIndexOutOfRange) {
  HostStep s;
  s.ring_index[0] = 1;  // one ring entry
  s.expect_forward_error(ErrorCode::out_of_range, "step.ring_index[0]");
}

// The planner checks every view before it reads a host copy through it:
// faults an outside probe found (reads past short buffers, wild strides).
TEST(BadInput, PlannerChecksViewsBeforeReading) {
  for (int64_t stride : {int64_t{-100000}, int64_t{1} << 40, int64_t{2}}) {
    HostStep s;
    s.desc.block_table.stride[0] = stride;
    s.desc.block_table.shape[0] = 2;  // a second row makes stride[0] matter
    expect_error([&] { s.plan(); }, ErrorCode::invalid_argument, "step.block_table: stride[0]");
  }
  HostStep short_qsl;
  short_qsl.desc.query_start_loc.shape[0] = 1;  // R + 1 = 2 entries needed
  expect_error([&] { short_qsl.plan(); }, ErrorCode::invalid_argument,
               "step.query_start_loc: dim 0 expected >= 2, got 1");
  HostStep short_lens;
  short_lens.desc.seq_lens.shape[0] = 0;
  expect_error([&] { short_lens.plan(); }, ErrorCode::invalid_argument,
               "step.seq_lens: dim 0 expected >= 1, got 0");
  HostStep short_slots;
  short_slots.desc.slot_mapping.shape[0] = HostStep::n - 1;
  expect_error([&] { short_slots.plan(); }, ErrorCode::invalid_argument,
               "step.slot_mapping: dim 0 expected >= 20, got 19");
  HostStep wrong_dtype;
  wrong_dtype.desc.seq_lens.dtype = DType::i64;
  expect_error([&] { wrong_dtype.plan(); }, ErrorCode::invalid_argument,
               "step.seq_lens: expected a i32 vector");
}

TEST(BadInput, PlanMaxContextBounded) {
  HostStep s;
  PlanOptions o;
  o.max_context = int64_t{1} << 34;  // once truncated to int32: a zero score stride
  expect_error([&] { s.backend->plan(s.desc, {s.c}, o); }, ErrorCode::invalid_argument,
               "plan options.max_context: expected 0..2^31-1 tokens, got 17179869184");
  o.max_context = -1;
  expect_error([&] { s.backend->plan(s.desc, {s.c}, o); }, ErrorCode::invalid_argument,
               "plan options.max_context");
}

TEST(BadInput, NegativeIdsRejectedAtPlan) {
  HostStep s;
  s.table[1] = -2;
  for (int32_t p = 16; p < HostStep::n; ++p) s.slots[static_cast<size_t>(p)] = -32 + p % 16;
  expect_error([&] { s.plan(); }, ErrorCode::out_of_range,
               "step.block_table[0][1]: block id expected >= 0, got -2");
  HostStep t;
  t.ring_index[0] = -1;
  expect_error([&] { t.plan(); }, ErrorCode::out_of_range, "step.ring_index[0]: expected >= 0");
}

// The plan reads each request's used block-table columns in one min / max
// pass; it must still name what an entry-by-entry scan would: the first
// entry (request, then column order) holding the largest id, and the first
// negative id; columns past a request's length are never read.
TEST(BadInput, PlanNamesFirstLargestAndFirstNegativeBlockIds) {
  const LayerConfig c = test::csa_config({4, 2, 64, 16}, 4);
  const auto backend = test::cpu_backend();
  sim::StepHost h;
  // Lengths 40, 16 and 33 at B = 16 use 3, 1 and 3 of the 4 columns.
  h.query_start_loc = {0, 1, 2, 3};
  h.seq_lens = {40, 16, 33};
  h.ring_index = {0, 1, 2};
  h.max_blocks = 4;
  h.block_table = {5, 9, 2, -7, 8, 100, -1, 1, 9, 4, 9, 0};
  // One row per request, at its last position.
  h.slot_mapping = {2 * 16 + 7, 8 * 16 + 15, 9 * 16 + 0};
  const sim::StepBuffers step(Device::host, h, 3);
  const StepPlan p = backend->plan(step.desc, {c});
  EXPECT_EQ(p.max_block_id.value, 9);
  EXPECT_EQ(p.max_block_id.index, 0);
  EXPECT_EQ(p.max_block_id.entry, 1);
  h.block_table[9] = -3;  // request 2, column 1: named, not the -5 in column 2
  h.block_table[10] = -5;
  const sim::StepBuffers negative(Device::host, std::move(h), 3);
  expect_error([&] { backend->plan(negative.desc, {c}); }, ErrorCode::out_of_range,
               "step.block_table[2][1]: block id expected >= 0, got -3");
}

// Forwards compare the caches with the largest ids the plan read: O(1) per
// layer, and still a precise message.
TEST(BadInput, ForwardChecksCachesAgainstPlannedIds) {
  HostStep s;
  const StepPlan p = s.plan();
  EXPECT_EQ(p.max_block_id.value, 3);  // positions 0..15 live in block table[0][0] = 3
  EXPECT_EQ(p.max_slot.value, 3 * 16 + 15);
  LayerCache small = s.views;
  small.kv.num_blocks = 3;
  DeviceBuffer ws(Device::host, p.workspace_bytes());
  expect_error(
      [&] {
        s.backend->forward_csa(s.c, s.desc, p, s.in, small, s.out, {ws.data(), ws.bytes()},
                               nullptr);
      },
      ErrorCode::out_of_range, "step.block_table[0][0]: block id expected 0..2");
  EXPECT_TRUE(s.output_untouched());
}

TEST(BadInput, WorkspaceTooSmall) {
  HostStep s;
  expect_error([&] { s.forward(-256); }, ErrorCode::invalid_argument,
               "workspace: bytes expected >=");
  EXPECT_TRUE(s.output_untouched());
}

TEST(BadInput, NullRequiredTensor) {
  HostStep s;
  s.in.index_key.data = nullptr;
  s.expect_forward_error(ErrorCode::invalid_argument, "index_key: required tensor is missing");
  HostStep t;
  t.out.output.data = nullptr;
  expect_error([&] { t.forward(); }, ErrorCode::invalid_argument,
               "output: required tensor is missing");
}

TEST(BadInput, BadQueryStartLoc) {
  HostStep s;
  s.qsl = {1, HostStep::n};
  expect_error([&] { s.plan(); }, ErrorCode::invalid_argument,
               "step.query_start_loc[0]: expected 0");
  s.qsl = {0, HostStep::n - 1};
  expect_error([&] { s.plan(); }, ErrorCode::invalid_argument, "expected num_tokens (20)");
  HostStep t;
  t.lens = {10};  // shorter than its 20 query tokens
  expect_error([&] { t.plan(); }, ErrorCode::invalid_argument, "step.seq_lens[0]");
}

TEST(BadInput, CudaBackendInACpuOnlyBuild) {
#if defined(STEP5_HAVE_CUDA)
  GTEST_SKIP() << "this build has the cuda backend; the CPU-only error cannot happen here";
#else
  expect_error([] { make_backend(BackendKind::cuda); }, ErrorCode::unsupported, "CPU-only build");
#endif
}

TEST(BadInput, SimulatorRejectsBadRequests) {
  auto backend = test::cpu_backend();
  const LayerConfig c = test::csa_config({4, 2, 64, 16}, 4);
  sim::SessionOptions o;
  o.max_requests = 2;
  o.max_context = 64;
  sim::LayerSession session(*backend, c, o);
  std::mt19937_64 rng(52);
  expect_error([&] { session.run(sim::random_step(c, rng, {2}, {0}, {4}, false)); },
               ErrorCode::invalid_argument, "distinct id in 0..1");
  expect_error([&] { session.run(sim::random_step(c, rng, {0}, {5}, {4}, false)); },
               ErrorCode::invalid_argument, "starting at most at its length (0)");
  sim::StepInput step = sim::random_step(c, rng, {0}, {0}, {4}, false);
  step.index_z.pop_back();
  expect_error([&] { session.run(step); }, ErrorCode::invalid_argument, "index_z expected 4");
  EXPECT_EQ(session.history(0).length, 0) << "a failed step must not change the history";
}

}  // namespace
}  // namespace step5
