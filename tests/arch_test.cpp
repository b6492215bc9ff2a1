// Beyond Hopper without a GPU: which kernel set a compute capability gets,
// the cuda_kernels option's names and validation, and (CUDA builds) the
// plan's choices for a GPU with less shared memory than Hopper.
#include <gtest/gtest.h>

#include <string>

#include "step5/attention.h"
#include "step5/testing/cuda_internals.h"

namespace step5 {
namespace {

using cuda_testing::KernelPath;
using cuda_testing::select_kernel_path;

TEST(KernelPath, HopperTakesItsKernelsOnlyWhenBuiltAndAsked) {
  EXPECT_EQ(select_kernel_path(9, 0, true, CudaKernels::automatic), KernelPath::hopper);
  // Forced portable, or a build without sm_90a SASS (the PTX JITs on 9.0).
  EXPECT_EQ(select_kernel_path(9, 0, true, CudaKernels::portable), KernelPath::portable);
  EXPECT_EQ(select_kernel_path(9, 0, false, CudaKernels::automatic), KernelPath::portable);
}

TEST(KernelPath, OtherSupportedGpusArePortable) {
  // Ampere, Ada, Blackwell (datacenter and consumer): sm_90a code runs on
  // 9.0 only, so every one of them takes the portable kernels.
  for (const auto& [major, minor] :
       {std::pair{8, 0}, {8, 6}, {8, 7}, {8, 9}, {10, 0}, {10, 3}, {11, 0}, {12, 0}, {12, 1}}) {
    EXPECT_EQ(select_kernel_path(major, minor, true, CudaKernels::automatic), KernelPath::portable)
        << major << "." << minor;
  }
}

TEST(KernelPath, OlderThanAmpereIsRefusedNamingWhatIsSupported) {
  for (const auto& [major, minor] : {std::pair{7, 5}, {7, 0}, {6, 1}}) {
    try {
      (void)select_kernel_path(major, minor, true, CudaKernels::automatic);
      FAIL() << major << "." << minor << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::unsupported);
      const std::string what = e.what();
      EXPECT_NE(what.find("compute capability 8.0 or newer"), std::string::npos) << what;
      EXPECT_NE(what.find(std::to_string(major) + "." + std::to_string(minor)), std::string::npos)
          << what;
    }
  }
  EXPECT_TRUE(cuda_testing::capability_problem(8, 0).empty());
  EXPECT_FALSE(cuda_testing::capability_problem(7, 5).empty());
}

TEST(CudaKernelsOption, NamesRoundTripAndBadNamesAreRefused) {
  for (const CudaKernels k : {CudaKernels::automatic, CudaKernels::portable}) {
    EXPECT_EQ(parse_cuda_kernels(cuda_kernels_name(k)), k);
  }
  for (const char* bad : {"", "Portable", "hopper", "automatic"}) {
    try {
      (void)parse_cuda_kernels(bad);
      FAIL() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("expected auto or portable"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW((void)parse_cuda_kernels(nullptr), Error);
}

TEST(CudaKernelsOption, ValidatedByTheFactoryForEveryBackend) {
  BackendOptions options;
  options.num_threads = 1;
  options.cuda_kernels = CudaKernels::portable;  // the cpu backend has one path
  EXPECT_EQ(make_backend(BackendKind::cpu, options)->kind(), BackendKind::cpu);
  options.cuda_kernels = static_cast<CudaKernels>(7);
  for (const BackendKind kind : {BackendKind::cpu, BackendKind::cuda}) {
    try {
      (void)make_backend(kind, options);
      FAIL() << "cuda_kernels 7 was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
      EXPECT_NE(std::string(e.what()).find("BackendOptions.cuda_kernels"), std::string::npos)
          << e.what();
    }
  }
}

// Compact attention tiles exist exactly where the default one can exceed
// the smallest supported GPU's shared memory (99 KB: sm_86, sm_89).
TEST(AttentionTiles, CompactVariantsWhereDefaultsDoNotFit) {
  using cuda_testing::has_compact_tile;
  EXPECT_TRUE(has_compact_tile(192, false, true));
  EXPECT_TRUE(has_compact_tile(192, true, true));
  EXPECT_TRUE(has_compact_tile(192, false, false));
  EXPECT_TRUE(has_compact_tile(192, true, false));
  EXPECT_FALSE(has_compact_tile(128, false, true));
  EXPECT_FALSE(has_compact_tile(128, true, true));
  EXPECT_FALSE(has_compact_tile(64, false, true));
  EXPECT_FALSE(has_compact_tile(64, true, false));
}

#if defined(STEP5_HAVE_CUDA)
constexpr size_t kSm89Smem = 99 * 1024;   // sm_86 / sm_89 opt-in per block
constexpr size_t kSm80Smem = 163 * 1024;  // sm_80
constexpr size_t kSm90Smem = 227 * 1024;  // sm_90

TEST(AttentionTiles, StagesFollowTheDeviceSharedMemory) {
  LayerConfig c;  // D = 192, K = 512, bf16: ~98 KB of default stages
  EXPECT_EQ(cuda_testing::paged_attention_stages(c, kSm90Smem),
            cuda_testing::attention_stages(false));
  EXPECT_EQ(cuda_testing::paged_attention_stages(c, kSm80Smem),
            cuda_testing::attention_stages(false));
  EXPECT_EQ(cuda_testing::paged_attention_stages(c, kSm89Smem),
            cuda_testing::attention_compact_stages(false));
  c.kv_dtype = DType::fp8_e4m3;
  EXPECT_EQ(cuda_testing::paged_attention_stages(c, kSm89Smem),
            cuda_testing::attention_compact_stages(true));
  c.head_size = 128;  // fits 99 KB at its default depth
  c.topk = 4096;
  EXPECT_EQ(cuda_testing::paged_attention_stages(c, kSm89Smem),
            cuda_testing::attention_stages(true));
  c.kv_dtype = DType::bf16;
  EXPECT_EQ(cuda_testing::paged_attention_stages(c, kSm89Smem),
            cuda_testing::attention_stages(false));
  // Less than any supported GPU has: refused, naming the bytes needed.
  try {
    (void)cuda_testing::paged_attention_stages(c, 48 * 1024);
    FAIL() << "48 KB was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("shared memory per block expected >="), std::string::npos)
        << e.what();
  }
}

// An sm_89-like portable device, described by hand: nothing below touches
// a GPU.
cuda_testing::DeviceInfo sm89_device() {
  cuda_testing::DeviceInfo device;
  device.sm_count = 84;
  device.major = 8;
  device.minor = 9;
  device.max_smem_per_block = kSm89Smem;
  device.path = cuda_testing::KernelPath::portable;
  return device;
}

// A uniform decode step of `requests` rows at `closed` closed regions (the
// fields the schedule reads), in one scoring chunk.
StepPlan decode_plan(int32_t requests, int32_t closed) {
  StepPlan plan;
  plan.kind = StepKind::uniform;
  plan.num_tokens = requests;
  plan.num_requests = requests;
  plan.query_len = 1;
  plan.chunk_rows = requests;
  ScoreChunk chunk;
  chunk.rows = {0, requests};
  chunk.columns = closed;
  plan.chunks = {chunk};
  return plan;
}

// Two KV groups of eight query heads (the other fields their defaults).
LayerConfig g2_h16() {
  LayerConfig c;
  c.num_heads = 16;
  c.num_kv_heads = 2;
  return c;
}

// The schedule of a portable device takes the generic indexer for a shape
// the Hopper path would run on tensor cores, and compact attention tiles.
TEST(PortableSchedule, GenericIndexerAndCompactTiles) {
  LayerConfig c = g2_h16();
  // K = 512: the default D = 192 bf16 tile (98 KB of stages) plus its page
  // lists no longer fits 99 KB.
  c.topk = 512;
  // One decode row at position 4799, 599 closed regions > K.
  const StepPlan plan = decode_plan(1, 599);
  const cuda_testing::DeviceInfo device = sm89_device();
  const LayerSchedule s = cuda_testing::schedule_layer(device, plan, c);
  EXPECT_EQ(s.indexer, IndexerPath::generic);
  EXPECT_EQ(s.attention_stages, cuda_testing::attention_compact_stages(false));
  // A generic indexer that cannot stage its queries is refused at plan time.
  c.num_kv_heads = 16;
  c.num_heads = 16;
  c.index_dim = 512;
  try {
    (void)cuda_testing::schedule_layer(device, plan, c);
    FAIL() << "G*I*Di*4 = 128 KB was accepted on a 99 KB GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("G*I*Di*4"), std::string::npos) << e.what();
  }
}

// The cache update rides on the select launch only where no row of the
// step can score a region the step closes: one query row per request, one
// scoring chunk. Verify steps and chunked steps keep its own launch, which
// runs before the indexer.
TEST(Schedule, CacheUpdateFoldsIntoSelectOnDecodeSteps) {
  const LayerConfig c = g2_h16();
  const StepPlan plan = decode_plan(2, 599);
  const cuda_testing::DeviceInfo device = sm89_device();
  EXPECT_TRUE(cuda_testing::schedule_layer(device, plan, c).cache_update_in_select);

  StepPlan verify = plan;  // rows 4r..4r+3 of request r: the later ones may
  verify.query_len = 4;    // score a region an earlier one closes
  verify.num_tokens = 8;
  verify.chunk_rows = 8;
  verify.chunks[0].rows = {0, 8};
  EXPECT_FALSE(cuda_testing::schedule_layer(device, verify, c).cache_update_in_select);

  StepPlan chunked = plan;  // two scoring chunks: two select launches, the
  chunked.chunk_rows = 1;   // fold is made for one
  chunked.chunks = {plan.chunks[0], plan.chunks[0]};
  chunked.chunks[0].rows = {0, 1};
  chunked.chunks[1].rows = {1, 2};
  EXPECT_FALSE(cuda_testing::schedule_layer(device, chunked, c).cache_update_in_select);

  LayerConfig swa = c;
  swa.kind = LayerKind::swa;
  EXPECT_FALSE(cuda_testing::schedule_layer(device, plan, swa).cache_update_in_select);
}

// The selection runs 1,024-thread CTAs for rows past its short columns
// only while the chunk's selections (rows x G) fit one CTA per SM: a
// step of few rows streams each row's scores through more warps; a step
// of more selections keeps two 512-thread CTAs to an SM.
TEST(Schedule, WideSelectionForFewSelections) {
  const LayerConfig c = g2_h16();
  const cuda_testing::DeviceInfo device = sm89_device();
  const int32_t fit = device.sm_count / c.num_kv_heads;
  EXPECT_TRUE(cuda_testing::schedule_layer(device, decode_plan(1, 599), c).select_wide);
  EXPECT_TRUE(cuda_testing::schedule_layer(device, decode_plan(fit, 599), c).select_wide);
  EXPECT_FALSE(cuda_testing::schedule_layer(device, decode_plan(fit + 1, 599), c).select_wide);
}

// Steps of many selections (at least eight per SM: prefill chunks) stage
// rows in shared memory in launches of 4,097 to 16,384 score columns where
// a row and its list fit a block (Hopper, not a 99 KB GPU); steps of fewer
// selections keep the instances that read a row from memory.
TEST(Schedule, StagedSelectionForManySelections) {
  const LayerConfig c = g2_h16();  // G = 2
  cuda_testing::DeviceInfo device = sm89_device();
  const int32_t many = 8 * device.sm_count / c.num_kv_heads;
  auto staged = [&](int32_t requests) {
    return cuda_testing::schedule_layer(device, decode_plan(requests, 599), c)
        .select_staged_columns;
  };
  EXPECT_EQ(staged(many), 0) << "a 99 KB GPU holds no staged row";
  device.max_smem_per_block = 227 * 1024;  // Hopper's opt-in limit
  EXPECT_EQ(staged(1), 0);
  EXPECT_EQ(staged(many - 1), 0);
  EXPECT_EQ(staged(many), 16384);
}

// Launches past 32,768 score columns take the long-row selection only where
// its 96 KB list and the kernel's static shared memory fit a block: not on
// a 99 KB GPU (sm_86 / sm_89), which keeps the two-pass instances.
TEST(Schedule, LongRowSelectionWhereItsListFits) {
  const LayerConfig c = g2_h16();
  cuda_testing::DeviceInfo device = sm89_device();
  EXPECT_FALSE(cuda_testing::schedule_layer(device, decode_plan(1, 599), c).select_long_rows);
  device.max_smem_per_block = 227 * 1024;  // Hopper's opt-in limit
  EXPECT_TRUE(cuda_testing::schedule_layer(device, decode_plan(1, 599), c).select_long_rows);
}

// Where the device runs clusters of the cluster selection (sm_90+), a step
// of few selections splits each row over one: the most parts whose CTAs
// fit the SMs and whose clusters all run at once.
TEST(Schedule, ClusterSelectionForFewSelections) {
  const LayerConfig c = g2_h16();  // G = 2
  cuda_testing::DeviceInfo device = sm89_device();
  device.sm_count = 132;
  EXPECT_EQ(cuda_testing::schedule_layer(device, decode_plan(1, 599), c).select_cluster_parts, 1)
      << "no clusters on this device";
  // 2 / 4 / 8 CTAs: 66 / 30 / 15 clusters at once (an H100's occupancy query).
  device.select_active_clusters[1] = 66;
  device.select_active_clusters[2] = 30;
  device.select_active_clusters[3] = 15;
  EXPECT_EQ(cuda_testing::schedule_layer(device, decode_plan(1, 599), c).select_cluster_parts, 8);
  EXPECT_EQ(cuda_testing::schedule_layer(device, decode_plan(7, 599), c).select_cluster_parts, 8);
  EXPECT_EQ(cuda_testing::schedule_layer(device, decode_plan(8, 599), c).select_cluster_parts, 4)
      << "16 clusters of 8 would not run at once";
  EXPECT_EQ(cuda_testing::schedule_layer(device, decode_plan(16, 599), c).select_cluster_parts, 2)
      << "32 clusters of 4 would not run at once";
  EXPECT_EQ(cuda_testing::schedule_layer(device, decode_plan(33, 599), c).select_cluster_parts, 2);
  EXPECT_EQ(cuda_testing::schedule_layer(device, decode_plan(34, 599), c).select_cluster_parts, 1)
      << "136 CTAs on 132 SMs";
  device.select_active_clusters[3] = 0;  // GPCs that hold no cluster of 8
  EXPECT_EQ(cuda_testing::schedule_layer(device, decode_plan(1, 599), c).select_cluster_parts, 4);
}

// An SWA layer's K/V write rides on its attention launch only where no row
// reads a slot another row of the step writes (one query row per request)
// and every row goes to the row kernel, which does the write; verify steps,
// prefill tiles and CSA layers keep it elsewhere.
TEST(Schedule, KvWriteFoldsIntoSwaAttentionOnDecodeSteps) {
  LayerConfig swa = g2_h16();
  swa.kind = LayerKind::swa;
  swa.head_size = 64;  // tiles that fit the 99 KB of this device
  const StepPlan plan = decode_plan(2, 599);
  const cuda_testing::DeviceInfo device = sm89_device();
  EXPECT_TRUE(cuda_testing::schedule_layer(device, plan, swa).kv_write_in_attention);

  StepPlan verify = plan;  // row 4r + 1 reads the slot row 4r writes
  verify.query_len = 4;
  verify.num_tokens = 8;
  verify.chunk_rows = 8;
  verify.chunks[0].rows = {0, 8};
  EXPECT_FALSE(cuda_testing::schedule_layer(device, verify, swa).kv_write_in_attention);

  StepPlan tiled = plan;  // a tile of the plan (SWA tiles always run tiled)
  tiled.row_tiles = {0, 1};
  const LayerSchedule tiles = cuda_testing::schedule_layer(device, tiled, swa);
  ASSERT_TRUE(tiles.tiled_attention);
  EXPECT_FALSE(tiles.kv_write_in_attention);

  EXPECT_FALSE(cuda_testing::schedule_layer(device, plan, g2_h16()).kv_write_in_attention);
}

// SWA tiles on the wgmma kernel run a persistent grid of one CTA per SM
// (the device's count, not a constant); the mma.sync tiles of a portable
// device one CTA per (tile, group). (A Hopper CSA schedule queries the
// GPU for its indexer's occupancy, so this test, run without one, has no
// CSA case; launch_wgmma never reads tile_ctas for CSA.)
TEST(Schedule, PersistentSwaTilesOnHopper) {
  LayerConfig swa = g2_h16();  // H/G = 8, D = 192: the wgmma kernel's shape
  swa.kind = LayerKind::swa;
  StepPlan tiled = decode_plan(2, 599);
  tiled.row_tiles = {0, 1};
  cuda_testing::DeviceInfo device = sm89_device();
  swa.head_size = 64;  // tiles that fit the 99 KB of this device
  const LayerSchedule portable = cuda_testing::schedule_layer(device, tiled, swa);
  ASSERT_TRUE(portable.tiled_attention);
  EXPECT_FALSE(portable.tile_wgmma);
  EXPECT_EQ(portable.tile_ctas, 0);
  swa.head_size = 192;
  device.major = 9;
  device.minor = 0;
  device.max_smem_per_block = kSm90Smem;
  device.path = cuda_testing::KernelPath::hopper;
  for (const int sms : {132, 114}) {  // H100 SXM, H100 PCIe
    device.sm_count = sms;
    const LayerSchedule s = cuda_testing::schedule_layer(device, tiled, swa);
    ASSERT_TRUE(s.tile_wgmma);
    EXPECT_EQ(s.tile_ctas, sms);
  }
}

// CSA tiles on the wgmma kernel: on the tile kernel outright where even
// independent selections of the plan's context stay under the crossover of
// the layer's KV dtype, decided tile by tile on the device past it (with
// the choice's arrays after the split partials in the scratch), on the row
// kernel where the choice's bitmap cannot hold a score row. Forced tiles
// and portable devices (the mma.sync kernel) keep the plan's rule. (The
// chunk's columns stay at K, so no indexer is scheduled: that would query
// the GPU.)
TEST(Schedule, CsaTilesChosenPerTilePastTheirWorstCase) {
  LayerConfig c = g2_h16();
  c.head_size = 192;
  c.topk = 512;
  StepPlan plan = decode_plan(2, 512);
  plan.kind = StepKind::mixed;
  plan.query_start = {0, 1, 2};
  plan.row_tiles = {0, 2};
  cuda_testing::DeviceInfo device = sm89_device();
  device.major = 9;
  device.minor = 0;
  device.sm_count = 132;
  device.max_smem_per_block = kSm90Smem;
  device.path = cuda_testing::KernelPath::hopper;
  auto schedule = [&](int32_t closed, DType kv) {
    plan.max_closed = closed;
    plan.score_stride = closed;
    c.kv_dtype = kv;
    return cuda_testing::schedule_layer(device, plan, c);
  };
  // 32K tokens: independent selections' union ~7.1 K, under bf16's 9 K.
  LayerSchedule s = schedule(4096, DType::bf16);
  EXPECT_TRUE(s.tiled_attention && s.tile_wgmma);
  EXPECT_EQ(s.tile_union_crossover, 0.0f);
  // fp8 rows cost half: past its 4.7 K the device decides.
  s = schedule(4096, DType::fp8_e4m3);
  EXPECT_TRUE(s.tiled_attention && s.tile_wgmma);
  EXPECT_FLOAT_EQ(s.tile_union_crossover, 4.7f);
  EXPECT_EQ(s.tile_choice_offset % 256, 0u);
  EXPECT_GE(s.scratch_bytes, s.tile_choice_offset + 2 * 256);
  // 128K tokens (union ~12.7 K): bf16 decides per tile too, unless the
  // plan options raise the crossover.
  s = schedule(16384, DType::bf16);
  EXPECT_FLOAT_EQ(s.tile_union_crossover, 9.0f);
  plan.tile_union_crossover = 20.0;
  s = schedule(16384, DType::bf16);
  EXPECT_TRUE(s.tiled_attention);
  EXPECT_EQ(s.tile_union_crossover, 0.0f);
  plan.tile_union_crossover = 0.0;
  // Score rows past the bitmap: rows.
  s = schedule(cuda_testing::tile_choice_max_regions() + 4, DType::bf16);
  EXPECT_FALSE(s.tiled_attention);
  EXPECT_EQ(s.tile_union_crossover, 0.0f);
  // Forced tiles never wait for a choice.
  plan.tile_attention = TileAttention::always;
  s = schedule(16384, DType::fp8_e4m3);
  EXPECT_TRUE(s.tiled_attention);
  EXPECT_EQ(s.tile_union_crossover, 0.0f);
  plan.tile_attention = TileAttention::automatic;
  // The mma.sync kernel keeps the plan's rule (union 3 K): 8K in tiles,
  // 32K on the row kernel, never a per-tile choice.
  device = sm89_device();
  c.head_size = 64;  // tiles that fit its 99 KB
  s = schedule(1024, DType::bf16);
  EXPECT_TRUE(s.tiled_attention && !s.tile_wgmma);
  s = schedule(4096, DType::bf16);
  EXPECT_FALSE(s.tiled_attention);
  EXPECT_EQ(s.tile_union_crossover, 0.0f);
}

// Programmatic dependent launch (griddepcontrol) exists from sm_90: the
// CSA schedule asks for it there, and never for SWA layers.
TEST(Schedule, ProgrammaticLaunchFromSm90) {
  const LayerConfig c = g2_h16();
  const StepPlan plan = decode_plan(2, 599);
  cuda_testing::DeviceInfo device = sm89_device();
  EXPECT_FALSE(cuda_testing::schedule_layer(device, plan, c).programmatic_launch);
  device.major = 9;
  device.minor = 0;
  device.max_smem_per_block = kSm90Smem;
  EXPECT_TRUE(cuda_testing::schedule_layer(device, plan, c).programmatic_launch);
  LayerConfig swa = c;
  swa.kind = LayerKind::swa;
  EXPECT_FALSE(cuda_testing::schedule_layer(device, plan, swa).programmatic_launch);
}
#endif

}  // namespace
}  // namespace step5
