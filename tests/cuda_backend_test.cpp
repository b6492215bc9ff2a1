// The cuda backend against the oracle on a small serving scenario (CSA and
// SWA), with its automatic kernels and with the portable ones. Without a
// usable GPU, or in a build without the cuda backend, every test is skipped
// visibly; `step5attn check [--portable]` is the full GPU matrix.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "step5/attention.h"
#include "step5/numerics.h"
#include "step5/testing/cuda_internals.h"
#include "step5/testing/device_memory.h"
#include "step5/testing/sim.h"
#include "step5/testing/step_buffers.h"
#include "test_util.h"

namespace step5 {
namespace {

void run_scenario(const LayerConfig& config, const BackendOptions& backend_options = {},
                  TileAttention tiles = TileAttention::automatic) {
  const std::unique_ptr<Backend> gpu = make_backend(BackendKind::cuda, backend_options);
  sim::ScenarioOptions options;
  options.requests = 3;
  options.min_prompt = 40;
  options.max_prompt = 300;
  options.chunk = 96;
  options.decode_steps = 4;
  sim::Scenario scenario(config, options);
  sim::SessionOptions session_options;
  session_options.max_requests = options.requests;
  session_options.max_context = scenario.max_context() + 16;
  session_options.padding_rows = 2;
  session_options.tile_attention = tiles;
  sim::LayerSession session(*gpu, config, session_options);
  for (int i = 0; !scenario.done(); ++i) {
    const sim::ScenarioStep step = scenario.next();
    const sim::StepOutput out = session.run(step.input);
    const sim::CheckResult result =
        sim::check_step(session, step.input, out, sim::default_tolerance(config), false);
    ASSERT_TRUE(result.ok) << "step " << i << " (" << step.label << "): " << result.message;
  }
}

// Where the cuda backend is built but no GPU is usable (CI), asking
// for it must fail with a clear error, never crash or hand back a backend.
TEST(CudaBackend, NoUsableGpuGivesClearError) {
#if !defined(STEP5_HAVE_CUDA)
  GTEST_SKIP() << "built without the cuda backend (BadInput covers that case)";
#else
  std::string why;
  if (test::gpu_present(why)) GTEST_SKIP() << "a usable GPU is present: nothing to refuse";
  try {
    (void)make_backend(BackendKind::cuda);
    FAIL() << "make_backend(cuda) succeeded without a usable GPU";
  } catch (const Error& e) {
    EXPECT_TRUE(e.code() == ErrorCode::unsupported || e.code() == ErrorCode::device_error)
        << error_code_name(e.code());
    EXPECT_NE(std::string(e.what()).find("expected a GPU of compute capability 8.0 or newer"),
              std::string::npos)
        << e.what();
  }
#endif
}

TEST(CudaBackend, RefusesOrReportsDevice) {
  STEP5_REQUIRE_GPU();
  const std::unique_ptr<Backend> gpu = make_backend(BackendKind::cuda);
  EXPECT_EQ(gpu->kind(), BackendKind::cuda);
  EXPECT_EQ(gpu->device(), Device::cuda);
}

TEST(CudaBackend, CsaScenarioMatchesOracle) {
  STEP5_REQUIRE_GPU();
  LayerConfig config;
  config.topk = 16;  // contexts past 128 tokens exercise scoring and selection
  config.spec_tokens = 3;
  run_scenario(config);
}

TEST(CudaBackend, SwaScenarioMatchesOracle) {
  STEP5_REQUIRE_GPU();
  LayerConfig config;
  config.kind = LayerKind::swa;
  config.window = 100;
  config.kv_dtype = DType::fp8_e4m3;
  run_scenario(config);
}

// Prefill rows through the tile attention kernel on every step that has
// them (chunks of 96 rows, requests of 40..300 tokens), CSA over bf16 and
// SWA over fp8 pages, with the tiles' rows mixed with decode rows.
TEST(CudaBackend, TileAttentionMatchesOracle) {
  STEP5_REQUIRE_GPU();
  LayerConfig csa;
  csa.topk = 16;
  run_scenario(csa, {}, TileAttention::always);
  LayerConfig swa;
  swa.kind = LayerKind::swa;
  swa.window = 100;
  swa.kv_dtype = DType::fp8_e4m3;
  run_scenario(swa, {}, TileAttention::always);
}

// The portable kernels (those of non-Hopper GPUs), forced on whatever GPU
// is here: a CSA layer the Hopper path would score on tensor cores (I = 4,
// Di = 256, fp8 summaries) plans the generic indexer and matches the oracle.
TEST(CudaBackend, PortableKernelsMatchOracle) {
  STEP5_REQUIRE_GPU();
  BackendOptions options;
  options.cuda_kernels = CudaKernels::portable;
  LayerConfig config;
  config.num_heads = 16;
  config.num_kv_heads = 2;
  config.topk = 16;
  config.spec_tokens = 1;
  {
    // One decode row at position 299 (37 closed regions > K): scored.
    const std::unique_ptr<Backend> gpu = make_backend(BackendKind::cuda, options);
    sim::StepHost host;
    host.query_start_loc = {0, 1};
    host.seq_lens = {300};
    host.block_table = {0, 1, 2, 3, 4};
    host.max_blocks = 5;
    host.slot_mapping = {299};
    host.ring_index = {0};
    const sim::StepBuffers step(Device::cuda, host, 1);
    const StepPlan plan = gpu->plan(step.desc, {config});
    EXPECT_EQ(plan.schedule(config).indexer, IndexerPath::generic)
        << indexer_path_name(plan.schedule(config).indexer);
  }
  run_scenario(config, options);
  config.kv_dtype = DType::fp8_e4m3;
  config.summary_dtype = DType::bf16;
  run_scenario(config, options);
  LayerConfig swa;
  swa.kind = LayerKind::swa;
  swa.window = 100;
  swa.kv_dtype = DType::fp8_e4m3;
  run_scenario(swa, options);
}

// The compact attention tiles (fewer cp.async stages, chosen where a GPU's
// shared memory cannot hold the default D = 192 tiles, e.g. sm_86 / sm_89)
// never run on Hopper by themselves: a plan whose schedule asks for them
// must give the default tiles' output bit for bit (warps take the same
// steps in the same order; only the copy depth differs).
TEST(CudaBackend, CompactAttentionTilesMatchDefault) {
  STEP5_REQUIRE_GPU();
  const std::unique_ptr<Backend> gpu = make_backend(BackendKind::cuda);
  for (const DType kv : {DType::bf16, DType::fp8_e4m3}) {
    LayerConfig c;
    c.kind = LayerKind::swa;
    c.num_heads = 16;
    c.num_kv_heads = 2;
    c.window = 300;
    c.kv_dtype = kv;
    const int64_t n = 400, blocks = 7;  // one request prefilling 400 tokens
    sim::StepHost host;
    host.query_start_loc = {0, static_cast<int32_t>(n)};
    host.seq_lens = {static_cast<int32_t>(n)};
    for (int32_t b = 0; b < blocks; ++b) host.block_table.push_back(b);
    host.max_blocks = static_cast<int32_t>(blocks);
    for (int64_t p = 0; p < n; ++p) host.slot_mapping.push_back(p);
    host.ring_index = {0};
    const sim::StepBuffers step(Device::cuda, host, n);

    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    auto random_bf16 = [&](int64_t count) {
      std::vector<uint16_t> v(static_cast<size_t>(count));
      for (uint16_t& x : v) x = float_to_bf16(normal(rng));
      return sim::DeviceBuffer::from(Device::cuda, v);
    };
    const int64_t H = c.num_heads, G = c.num_kv_heads, D = c.head_size;
    const sim::DeviceBuffer q = random_bf16(n * H * D), k = random_bf16(n * G * D),
                            v = random_bf16(n * G * D);
    const auto block_bytes = static_cast<int64_t>(cache_bytes_per_block(c));
    sim::DeviceBuffer cache_blocks(Device::cuda, static_cast<size_t>(blocks * block_bytes));
    const LayerCache cache =
        packed_layer_cache(c, cache_blocks.data(), blocks, block_bytes, nullptr, 0, Device::cuda);
    SwaInputs in;
    in.query = TensorView::contiguous(q.data(), DType::bf16, {n, H, D}, Device::cuda);
    in.key = TensorView::contiguous(k.data(), DType::bf16, {n, G, D}, Device::cuda);
    in.value = TensorView::contiguous(v.data(), DType::bf16, {n, G, D}, Device::cuda);

    auto run = [&](const StepPlan& plan) {
      sim::DeviceBuffer workspace(Device::cuda, plan.workspace_bytes());
      sim::DeviceBuffer out(Device::cuda, static_cast<size_t>(n * H * D) * 2);
      LayerOutputs outputs;
      outputs.output = TensorView::contiguous(out.data(), DType::bf16, {n, H, D}, Device::cuda);
      const Workspace ws{workspace.data(), workspace.bytes()};
      gpu->prepare_step(plan, ws, nullptr);
      gpu->forward_swa(c, step.desc, plan, in, cache.kv, outputs, ws, nullptr);
      return out.to_vector<uint16_t>(static_cast<size_t>(n * H * D));
    };
    const StepPlan plan = gpu->plan(step.desc, {c});
    const bool fp8 = kv == DType::fp8_e4m3;
    ASSERT_EQ(plan.schedule(c).attention_stages, cuda_testing::attention_stages(fp8));
    StepPlan compact = plan;
    compact.schedules[0].attention_stages = cuda_testing::attention_compact_stages(fp8);
    const std::vector<uint16_t> expected = run(plan);
    const std::vector<uint16_t> got = run(compact);
    EXPECT_EQ(got, expected) << dtype_name(kv);
  }
}

// Heads per group are a run-time value of the attention kernels: an
// uncommon one (3) matches the oracle, and one past the M tile (17) is
// refused when the step is planned, naming the supported range.
TEST(CudaBackend, AnyHeadsPerGroupUpTo16) {
  STEP5_REQUIRE_GPU();
  LayerConfig config;
  config.num_kv_heads = 2;
  config.num_heads = 6;
  config.topk = 16;
  run_scenario(config);
  config.num_heads = 34;
  try {
    run_scenario(config);
    FAIL() << "H/G = 17 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("expected 1..16, got 17"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace step5
