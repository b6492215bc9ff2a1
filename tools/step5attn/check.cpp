// `step5attn check [--quick | --tiny] [--portable]`: every operation and whole-layer forward of
// the cuda backend against the cpu reference over a matrix of shapes, plus
// the device fp8 conversions and CUDA-graph replay. One line per failure,
// then exactly "N passed, N failed". --quick is a covering subset (< 1 min),
// --tiny the few small cases run under compute-sanitizer; --portable runs
// the backend with CudaKernels::portable (the kernels of non-Hopper GPUs).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <random>

#include "step5/numerics.h"
#include "step5attn/check.h"
#include "step5attn/cli.h"
#include "step5attn/commands.h"
#if defined(STEP5_HAVE_CUDA)
#include "step5/testing/cuda_internals.h"
#include "step5/testing/device_memory.h"
#endif

namespace step5::tool {

#if defined(STEP5_HAVE_CUDA)
namespace {

using check::concat;
using check::Tally;

struct Case {
  std::string name;
  LayerConfig config;
  int tier = 2;  // 0: --tiny (sanitizers), 1: --quick, 2: full
  // Scenario (prefill chunks, mixed, decode / verify) when contexts is
  // empty; else histories of these lengths, then decode or verify steps.
  sim::ScenarioOptions scenario;
  std::vector<int32_t> contexts;
  int steps = 3;
  int64_t padding = 0;
  size_t max_score_bytes = 0;  // SessionOptions::max_score_bytes
  TileAttention tiles = TileAttention::automatic;
  double tile_union_crossover = 0.0;  // SessionOptions::tile_union_crossover
  // Decode cases: zero index weights, so every score is 0 and selection is
  // decided by ties alone (lowest regions first).
  bool tied_scores = false;
  // Scenario cases: one element of every query head scaled by 2^-60, so no
  // head is exact in f16 at any scale and the fp8 attention kernels that
  // stage Q as scaled f16 must take their bf16 path.
  bool wide_queries = false;
};

// One element of every [D] query head times 2^-60 (still a normal bf16).
void widen_query_range(const LayerConfig& c, std::vector<uint16_t>& query) {
  const auto D = static_cast<size_t>(c.head_size);
  for (size_t h = 0; h < query.size() / D; ++h) {
    uint16_t& x = query[h * D + h % D];
    x = float_to_bf16(bf16_to_float(x) * 0x1p-60f);
  }
}

// CSA tiles decided one by one on the device at this crossover.
Case chosen_tiles_case(Case k, double crossover) {
  k.name += " tiles chosen";
  k.tile_union_crossover = crossover;
  return k;
}

Case wide_query_case(Case k) {
  k.name += " wide-range queries";
  k.wide_queries = true;
  return k;
}

// A byte as 0x.. for messages.
std::string hex(uint8_t byte) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%x", unsigned{byte});
  return buf;
}

LayerConfig csa(int G, int hpg, int D, int B, int K, DType kv, DType summary, int mtp) {
  LayerConfig c;
  c.kind = LayerKind::csa;
  c.num_kv_heads = G;
  c.num_heads = G * hpg;
  c.head_size = D;
  c.block_size = B;
  c.topk = K;
  c.kv_dtype = kv;
  c.summary_dtype = summary;
  c.spec_tokens = mtp;
  if (kv == DType::fp8_e4m3) {
    c.k_scale = 0.5f;
    c.v_scale = 0.25f;
  }
  return c;
}

LayerConfig swa(int G, int hpg, int D, int B, int W, DType kv, int mtp) {
  LayerConfig c = csa(G, hpg, D, B, 1, kv, DType::fp8_e4m3, mtp);
  c.kind = LayerKind::swa;
  c.window = W;
  return c;
}

sim::ScenarioOptions scenario(int requests, int min_prompt, int max_prompt, bool gate) {
  sim::ScenarioOptions o;
  o.requests = requests;
  o.min_prompt = min_prompt;
  o.max_prompt = max_prompt;
  o.gate = gate;
  return o;
}

sim::ScenarioOptions chunked(sim::ScenarioOptions o, int chunk) {
  o.chunk = chunk;
  return o;
}

Case scenario_case(std::string name, LayerConfig c, sim::ScenarioOptions o, int tier) {
  Case k;
  k.name = std::move(name);
  k.config = c;
  k.scenario = o;
  k.tier = tier;
  return k;
}

LayerConfig with_indexer(LayerConfig c, int index_heads, int index_dim) {
  c.index_heads = index_heads;
  c.index_dim = index_dim;
  return c;
}

Case decode_case(std::string name, LayerConfig c, std::vector<int32_t> contexts, bool gate,
                 int tier, bool tied_scores = false) {
  Case k;
  k.tied_scores = tied_scores;
  k.name = std::move(name);
  k.config = c;
  k.contexts = std::move(contexts);
  k.scenario.gate = gate;
  k.padding = 3;
  k.tier = tier;
  return k;
}

// `n` decode contexts spread evenly over [lo, hi] (one: lo).
std::vector<int32_t> spread_contexts(int n, int32_t lo, int32_t hi) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(n == 1 ? lo : lo + static_cast<int32_t>(int64_t{hi - lo} * i / (n - 1)));
  }
  return out;
}

// A prefill of one long prompt in chunks of `chunk` tokens.
Case long_prefill_case(std::string name, LayerConfig c, int prompt, int chunk,
                       size_t max_score_bytes, int tier) {
  sim::ScenarioOptions o = scenario(1, prompt, prompt, true);
  o.chunk = chunk;
  o.decode_steps = 2;
  Case k = scenario_case(std::move(name), c, o, tier);
  k.max_score_bytes = max_score_bytes;
  k.tiles = TileAttention::always;  // whatever the heuristic would pick for the context
  return k;
}

std::vector<Case> cases() {
  const DType bf = DType::bf16, f8 = DType::fp8_e4m3;
  return {
      scenario_case("csa G8 H64 D192 B64 K64 kv=bf16 sum=fp8", csa(8, 8, 192, 64, 64, bf, f8, 0),
                    scenario(3, 200, 900, true), 1),
      scenario_case("csa G8 H64 D192 B64 K64 kv=fp8 sum=bf16 mtp=3",
                    csa(8, 8, 192, 64, 64, f8, bf, 3), scenario(3, 200, 700, false), 1),
      scenario_case("csa G1 H1 D128 B16 K4", csa(1, 1, 128, 16, 4, bf, f8, 0),
                    scenario(2, 20, 200, true), 0),
      scenario_case("csa G2 H32 D64 B256 K4 kv=fp8 mtp=3", csa(2, 16, 64, 256, 4, f8, f8, 3),
                    scenario(3, 30, 400, true), 0),
      decode_case("csa G8 H64 D192 B64 K512 decode ctx 1..8300", csa(8, 8, 192, 64, 512, bf, f8, 0),
                  {1, 8300, 4200}, true, 1),
      decode_case("csa G8 H64 D192 B64 K512 kv=fp8 sum=bf16 verify mtp=3 ctx 9..8250",
                  csa(8, 8, 192, 64, 512, f8, bf, 3), {8250, 9, 5000}, false, 2),
      scenario_case("csa G8 H128 D192 B64 K64", csa(8, 16, 192, 64, 64, bf, f8, 0),
                    scenario(2, 100, 600, true), 2),
      scenario_case("csa G2 H16 D192 B8 K64 sum=bf16 mtp=3", csa(2, 8, 192, 8, 64, bf, bf, 3),
                    scenario(3, 100, 900, true), 2),
      decode_case("csa G2 H2 D192 B256 K4 decode ctx 2000", csa(2, 1, 192, 256, 4, bf, f8, 0),
                  {2000, 17}, true, 2),
      // The tensor-core indexer with index heads padded (I=2, Di=128) and
      // the generic path (I=8); G=16 fills the widest tile (N=256).
      scenario_case("csa G4 H32 D128 B64 K16 I2 Di128",
                    with_indexer(csa(4, 8, 128, 64, 16, bf, f8, 0), 2, 128),
                    scenario(3, 100, 600, true), 1),
      // Di = 512: an index-query row spans two warps, so staging gathers
      // its exponent through shared memory (Di <= 256 does it in a warp).
      decode_case("csa G8 H64 D192 B64 K64 I4 Di512 decode",
                  with_indexer(csa(8, 8, 192, 64, 64, bf, f8, 0), 4, 512), {3000, 700}, true, 1),
      decode_case("csa G8 H64 D192 B64 K64 I8 Di64 generic indexer decode",
                  with_indexer(csa(8, 8, 192, 64, 64, bf, bf, 0), 8, 64), {3000, 700}, true, 1),
      decode_case("csa G16 H64 D64 B64 K32 verify mtp=3", csa(16, 4, 64, 64, 32, f8, f8, 3),
                  {2100, 900, 1}, true, 2),
      // 70 requests x G = 16 = 1,120 selections, at least 8 per SM on GPUs
      // of up to 140 SMs: a decode step of many selections, whose selection
      // launch carries the step's cache update (K/V and summaries).
      decode_case("csa G16 H64 D64 B64 K32 decode 70 requests", csa(16, 4, 64, 64, 32, bf, f8, 0),
                  spread_contexts(70, 40, 2050), true, 1),
      // Ties: all scores 0, selection by index alone, in shared memory
      // (C <= 6144) and through the global radix fallback (C > 6144).
      decode_case("csa G8 H64 D192 B64 K512 tied scores ctx 8300",
                  csa(8, 8, 192, 64, 512, bf, f8, 0), {8300, 5000}, false, 1, true),
      decode_case("csa G2 H16 D128 B64 K512 tied scores ctx 60000",
                  csa(2, 8, 128, 64, 512, bf, f8, 0), {60000}, false, 2, true),
      // Heads per group are a run-time value of the attention kernels:
      // H/G 2, 3, 4, 5 and 12 next to 1, 8 and 16 above and below.
      scenario_case("csa G2 H4 D128 B16 K8 kv=fp8", csa(2, 2, 128, 16, 8, f8, f8, 0),
                    scenario(2, 40, 300, true), 0),
      decode_case("csa G4 H12 D192 B64 K64 verify mtp=3", csa(4, 3, 192, 64, 64, bf, f8, 3),
                  {3000, 70}, true, 1),
      decode_case("csa G1 H4 D64 B32 K16 decode", csa(1, 4, 64, 32, 16, bf, bf, 0), {900, 5}, false,
                  1),
      // B / 8 = 3 regions per block, not a power of two: the indexer's
      // block lookups divide instead of shifting.
      scenario_case("csa G4 H16 D128 B24 K16 kv=fp8", csa(4, 4, 128, 24, 16, f8, f8, 0),
                    scenario(3, 100, 700, true), 1),
      decode_case("csa G4 H16 D128 B24 K16 verify mtp=3", csa(4, 4, 128, 24, 16, bf, f8, 3),
                  {700, 30}, true, 0),
      scenario_case("swa G3 H15 D128 B16 W100 kv=fp8 mtp=3", swa(3, 5, 128, 16, 100, f8, 3),
                    scenario(2, 60, 400, true), 1),
      decode_case("swa G2 H24 D192 B64 W512 decode", swa(2, 12, 192, 64, 512, bf, 0), {2000, 3},
                  true, 1),
      scenario_case("swa G8 H64 D192 B64 W512", swa(8, 8, 192, 64, 512, bf, 0),
                    scenario(3, 200, 900, true), 1),
      scenario_case("swa G8 H64 D192 B16 W128 kv=fp8 mtp=3", swa(8, 8, 192, 16, 128, f8, 3),
                    scenario(3, 100, 600, false), 1),
      decode_case("swa G8 H64 D192 B64 W512 decode ctx 1..8300", swa(8, 8, 192, 64, 512, bf, 0),
                  {1, 8300}, true, 1),
      scenario_case("swa G1 H1 D64 B8 W16", swa(1, 1, 64, 8, 16, bf, 0), scenario(2, 10, 100, true),
                    0),
      scenario_case("swa G2 H32 D128 B256 W1000 kv=fp8", swa(2, 16, 128, 256, 1000, f8, 0),
                    scenario(2, 300, 1500, true), 2),
      // Tile attention (prefill requests of >= 8 rows): contexts past one
      // window of region masks (2,048 regions), scoring chunks of ~100 rows
      // that cut tiles, windows wider than the history.
      long_prefill_case("csa G1 H8 D64 B64 K64 I2 Di64 prefill 17000 score chunks",
                        with_indexer(csa(1, 8, 64, 64, 64, bf, f8, 0), 2, 64), 17000, 2048,
                        size_t{1} << 20, 1),
      // A chunk of 2,048 rows past 32K tokens: more than 4,096 score columns
      // in a step of many selections, so the selection stages its rows in
      // shared memory (with the indexer's row maxima).
      long_prefill_case("csa G1 H8 D64 B64 K64 I1 Di64 prefill 34000 staged selection",
                        with_indexer(csa(1, 8, 64, 64, 64, bf, f8, 0), 1, 64), 34000, 2048,
                        size_t{256} << 20, 2),
      long_prefill_case("csa G2 H8 D128 B16 K32 kv=fp8 I2 Di64 prefill 2500",
                        with_indexer(csa(2, 4, 128, 16, 32, f8, bf, 0), 2, 64), 2500, 700,
                        size_t{64} << 10, 0),
      scenario_case("swa G4 H32 D128 B16 W2000", swa(4, 8, 128, 16, 2000, bf, 0),
                    scenario(3, 300, 1500, true), 1),
      // H/G = 8 with bf16 KV: on Hopper the tiles run the wgmma kernel;
      // small enough for the sanitizers (--tiny).
      scenario_case("csa G2 H16 D64 B16 K16 tiles", csa(2, 8, 64, 16, 16, bf, f8, 0),
                    scenario(2, 60, 300, true), 0),
      scenario_case("swa G1 H8 D128 B16 W40 tiles", swa(1, 8, 128, 16, 40, bf, 0),
                    scenario(2, 60, 200, true), 0),
      // Tiles decided on the device (the wgmma kernel on Hopper) at a
      // crossover of 1.2 K: a prompt's early tiles (every closed region
      // selected, union <= K) stay tiles, its later ones (union ~2 K) go
      // to the row kernel, in the same launches.
      chosen_tiles_case(scenario_case("csa G2 H16 D64 B16 K16", csa(2, 8, 64, 16, 16, bf, f8, 0),
                                      scenario(2, 60, 300, true), 0),
                        1.2),
      chosen_tiles_case(
          scenario_case("csa G2 H16 D64 B16 K16 kv=fp8", csa(2, 8, 64, 16, 16, f8, f8, 0),
                        scenario(2, 60, 300, true), 0),
          1.2),
      scenario_case("csa G2 H16 D64 B16 K16 kv=fp8 tiles", csa(2, 8, 64, 16, 16, f8, f8, 0),
                    scenario(2, 60, 300, true), 0),
      wide_query_case(scenario_case("csa G2 H16 D64 B16 K16 kv=fp8 tiles",
                                    csa(2, 8, 64, 16, 16, f8, f8, 0), scenario(2, 60, 300, true),
                                    0)),
      // fp8 SWA tiles over long windows (many stages per tile): on Hopper
      // their pages widen to f16 (Q staged as scaled f16), or to bf16 with
      // wide-range queries.
      scenario_case("swa G1 H8 D64 B16 W2048 kv=fp8 tiles", swa(1, 8, 64, 16, 2048, f8, 0),
                    scenario(2, 2100, 2600, true), 1),
      wide_query_case(scenario_case("swa G1 H8 D64 B16 W2048 kv=fp8 tiles",
                                    swa(1, 8, 64, 16, 2048, f8, 0), scenario(2, 2100, 2600, true),
                                    1)),
      // The fp8 SWA kernel on Hopper, small enough for the sanitizers
      // (--tiny); and SWA windows past one window of regions (2,048
      // regions, 16K tokens), so that a tile's list is built twice.
      scenario_case("swa G1 H8 D64 B16 W100 kv=fp8 tiles", swa(1, 8, 64, 16, 100, f8, 0),
                    scenario(2, 60, 300, true), 0),
      long_prefill_case("swa G1 H8 D64 B64 W16500 prefill 16900", swa(1, 8, 64, 64, 16500, bf, 0),
                        16900, 4096, 0, 2),
      long_prefill_case("swa G1 H8 D64 B64 W16500 kv=fp8 prefill 16900",
                        swa(1, 8, 64, 64, 16500, f8, 0), 16900, 4096, 0, 2),
      // Hopper SWA tiles run a persistent grid of one CTA per SM: prefill
      // chunks of 512 rows at G = 8 (256 tiles x groups) give each CTA of a
      // 132-SM GPU two or more, so a CTA prepares the next item while it
      // stores this one; small enough for the sanitizers (--tiny).
      scenario_case("swa G8 H64 D64 B16 W40 tiles chunk 512", swa(8, 8, 64, 16, 40, bf, 0),
                    chunked(scenario(2, 500, 700, true), 512), 0),
      scenario_case("swa G8 H64 D64 B16 W100 kv=fp8 tiles chunk 512", swa(8, 8, 64, 16, 100, f8, 0),
                    chunked(scenario(2, 500, 700, true), 512), 0),
      // fp8 decode rows of H/G = 8, split across CTAs; small enough for the
      // sanitizers (--tiny).
      decode_case("swa G1 H8 D128 B16 W400 kv=fp8 decode", swa(1, 8, 128, 16, 400, f8, 0),
                  {1000, 7}, true, 0),
      long_prefill_case("swa G2 H4 D192 B32 W700 kv=fp8 prefill 3000",
                        swa(2, 2, 192, 32, 700, f8, 0), 3000, 1024, 0, 1),
  };
}

// Runs `step` on both sessions and compares; false after a failure.
// With `exact_selection` (tied scores), the selection must equal the cpu's
// bit for bit: every tie goes to the lower region, as SPEC 4 says.
bool run_pair(sim::LayerSession& cpu, sim::LayerSession& gpu, const sim::StepInput& in,
              const std::string& what, const LayerConfig& c, Tally& tally,
              bool exact_selection = false) {
  const sim::StepOutput want = cpu.run(in);
  const sim::StepOutput got = gpu.run(in);
  std::string why = check::compare_step(gpu, in, got, want, sim::default_tolerance(c));
  if (why.empty() && exact_selection && got.selected != want.selected) {
    why = "tied scores: selection differs from the cpu's lowest-index choice";
  }
  if (why.empty()) return true;
  tally.fail(what, why);
  return false;
}

void run_scenario_case(Backend& cpu, Backend& cuda, const Case& k, Tally& tally) {
  sim::Scenario sc(k.config, k.scenario);
  sim::SessionOptions opt;
  opt.max_requests = k.scenario.requests;
  opt.max_context = sc.max_context() + 16;
  opt.padding_rows = 2;
  opt.max_score_bytes = k.max_score_bytes;
  opt.tile_attention = k.tiles;
  opt.tile_union_crossover = k.tile_union_crossover;
  sim::LayerSession a(cpu, k.config, opt), b(cuda, k.config, opt);
  for (int i = 0; !sc.done(); ++i) {
    sim::ScenarioStep step = sc.next();
    if (k.wide_queries) widen_query_range(k.config, step.input.query);
    if (!run_pair(a, b, step.input, concat(k.name, " step ", i, " (", step.label, ")"), k.config,
                  tally)) {
      return;
    }
  }
  tally.pass();
}

void run_decode_case(Backend& cpu, Backend& cuda, const Case& k, Tally& tally) {
  const LayerConfig& c = k.config;
  const auto R = static_cast<int32_t>(k.contexts.size());
  sim::SessionOptions opt;
  opt.max_requests = R;
  opt.max_context = *std::max_element(k.contexts.begin(), k.contexts.end()) +
                    int64_t{k.steps} * (c.spec_tokens + 1) + 8;
  opt.padding_rows = k.padding;
  sim::LayerSession a(cpu, c, opt), b(cuda, c, opt);
  std::mt19937_64 rng(11);
  std::vector<int32_t> requests(static_cast<size_t>(R)), lens = k.contexts;
  for (int32_t r = 0; r < R; ++r) {
    requests[static_cast<size_t>(r)] = r;
    const int32_t len = lens[static_cast<size_t>(r)];
    const check::HistoryRows h = check::random_history(c, rng, len);
    const bool is_csa = c.kind == LayerKind::csa;
    for (sim::LayerSession* s : {&a, &b}) {
      s->write_history(r, len, h.key.data(), h.value.data(), is_csa ? h.index_key.data() : nullptr,
                       is_csa ? h.index_z.data() : nullptr);
    }
  }
  // Decode (k = 0) or verify steps of k+1 rows; after each verify a random
  // number of drafts is rejected and rewritten by the next step.
  std::vector<int32_t> start = lens;
  const std::vector<int32_t> qlen(static_cast<size_t>(R), c.spec_tokens + 1);
  std::uniform_int_distribution<int> reject(0, c.spec_tokens);
  for (int i = 0; i < k.steps; ++i) {
    sim::StepInput in = sim::random_step(c, rng, requests, start, qlen, k.scenario.gate, true);
    if (k.tied_scores) std::fill(in.index_weight.begin(), in.index_weight.end(), 0.0f);
    if (!run_pair(a, b, in, concat(k.name, " step ", i), c, tally, k.tied_scores)) return;
    for (int32_t r = 0; r < R; ++r) {
      start[static_cast<size_t>(r)] += c.spec_tokens + 1 - reject(rng);
    }
  }
  tally.pass();
}

// The kv write's fp8 rounding against step5::float_to_fp8_e4m3: every bf16
// value, every midpoint between neighbouring e4m3 values (the ties) and the
// saturation edge.
void run_fp8_case(Tally& tally) {
  std::vector<float> values;
  for (uint32_t b = 0; b < 0x10000u; ++b) values.push_back(bf16_to_float(static_cast<uint16_t>(b)));
  for (uint32_t v = 0; v < 0x7e; ++v) {
    const float lo = fp8_e4m3_to_float(static_cast<uint8_t>(v));
    const float hi = fp8_e4m3_to_float(static_cast<uint8_t>(v + 1));
    const float mid = 0.5f * (lo + hi);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      values.push_back(x);
      values.push_back(-x);
    }
  }
  for (float x : {448.0f, 463.99f, 464.0f, 464.01f, 480.0f, 1e30f}) {
    values.push_back(x);
    values.push_back(-x);
  }
  sim::DeviceBuffer in = sim::DeviceBuffer::from(Device::cuda, values);
  sim::DeviceBuffer out(Device::cuda, values.size());
  cuda_testing::launch_fp8_convert(static_cast<const float*>(in.data()),
                                   static_cast<uint8_t*>(out.data()),
                                   static_cast<int64_t>(values.size()), nullptr);
  sim::synchronize(Device::cuda);
  const std::vector<uint8_t> got = out.to_vector<uint8_t>(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const uint8_t want = float_to_fp8_e4m3(values[i]);
    if (got[i] != want) {
      tally.fail("fp8 e4m3 conversion",
                 concat("x = ", values[i], ": device ", hex(got[i]), ", host ", hex(want)));
      return;
    }
  }
  tally.pass();
}

// f16 bits as a float (exact; the check's host side of e4m3 -> f16).
float f16_to_float(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const float mantissa = static_cast<float>(h & 0x3ff);
  const float magnitude = exponent == 0    ? std::ldexp(mantissa, -24)
                          : exponent == 31 ? (mantissa == 0 ? INFINITY : NAN)
                                           : std::ldexp(1024.0f + mantissa, exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

// The device's widening of e4m3 pairs (the path this GPU and build run:
// hardware conversion, or the sm_80 fallback of the compute_80 PTX) against
// the host's e4m3 values, for all 65536 pairs. NaN bytes must give NaN in
// f16; their bf16 form is finite on every path (the bit move after the f16
// conversion does not keep NaN, on Hopper as with the fallback), so it is
// not compared.
void run_e4m3_widen_case(Tally& tally) {
  constexpr uint32_t kPairs = 1u << 16;
  sim::DeviceBuffer out(Device::cuda, 3 * kPairs * sizeof(uint32_t));
  cuda_testing::launch_e4m3_widen(static_cast<uint32_t*>(out.data()), nullptr);
  sim::synchronize(Device::cuda);
  const std::vector<uint32_t> got = out.to_vector<uint32_t>(3 * kPairs);
  auto same = [](float device, float host) {
    return std::isnan(host) ? std::isnan(device)
                            : device == host && std::signbit(device) == std::signbit(host);
  };
  for (uint32_t p = 0; p < kPairs; ++p) {
    for (int half = 0; half < 2; ++half) {
      const auto byte = static_cast<uint8_t>(p >> (8 * half));
      const float want = fp8_e4m3_to_float(byte);
      const float f16 = f16_to_float(static_cast<uint16_t>(got[3 * p] >> (16 * half)));
      const float f16_hi = f16_to_float(static_cast<uint16_t>(got[3 * p + 1] >> (16 * half)));
      const float bf16 = bf16_to_float(static_cast<uint16_t>(got[3 * p + 2] >> (16 * half)));
      if (!same(f16, want) || !same(f16_hi, want) || (!std::isnan(want) && !same(bf16, want))) {
        tally.fail("e4m3 widening", concat("byte ", hex(byte), " = ", want, ": device f16 ", f16,
                                           ", f16 (high half) ", f16_hi, ", bf16 ", bf16));
        return;
      }
    }
  }
  tally.pass();
}

}  // namespace
#endif

#if defined(STEP5_HAVE_CUDA)
namespace {

// Comma-separated substrings; a case runs when its name contains any.
bool selected_by(const std::string& filter, const std::string& name) {
  if (filter.empty()) return true;
  size_t begin = 0;
  while (begin <= filter.size()) {
    const size_t end = std::min(filter.find(',', begin), filter.size());
    const std::string item = filter.substr(begin, end - begin);
    if (!item.empty() && name.find(item) != std::string::npos) return true;
    begin = end + 1;
  }
  return false;
}

}  // namespace
#endif

int run_check(int argc, char** argv) {
  bool quick = false, tiny = false, portable = false;
  std::string filter;
  std::vector<std::string> positional;
  std::string error;
  if (!parse_args(argc, argv,
                  {{"quick", nullptr, &quick},
                   {"tiny", nullptr, &tiny},
                   {"filter", &filter, nullptr},
                   {"portable", nullptr, &portable}},
                  positional, error) ||
      !positional.empty()) {
    print_error("check",
                error.empty()
                    ? "usage: step5attn check [--quick | --tiny] [--filter A,B] [--portable]"
                    : error);
    return kExitUsage;
  }
#if defined(STEP5_HAVE_CUDA)
  std::string why;
  if (!cuda_testing::cuda_backend_available(0, &why)) {
    print_error("check", concat("the cuda backend cannot run here: ", why));
    return kExitFailure;
  }
  const std::unique_ptr<Backend> cpu = make_backend(BackendKind::cpu);
  BackendOptions options;
  options.cuda_kernels = portable ? CudaKernels::portable : CudaKernels::automatic;
  const std::unique_ptr<Backend> gpu = make_backend(BackendKind::cuda, options);
  std::cerr << "cuda backend: " << cuda_testing::cuda_backend_summary(*gpu) << "\n";
  Tally tally;
  // Progress on stderr (unbuffered), so a run cut short still shows where.
  auto guarded = [&](const std::string& name, const std::function<void()>& body) {
    if (!selected_by(filter, name)) return;
    const auto t0 = std::chrono::steady_clock::now();
    const int failed = tally.failed;
    try {
      body();
    } catch (const std::exception& e) {
      tally.fail(name, concat("threw: ", e.what()));
    }
    std::cout.flush();
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    std::cerr << (tally.failed == failed ? "  ok   " : "  FAIL ") << name << " (" << dt.count()
              << " s)\n";
  };
  guarded("fp8 e4m3 conversion", [&] { run_fp8_case(tally); });
  guarded("e4m3 widening", [&] { run_e4m3_widen_case(tally); });
  for (const Case& k : cases()) {
    if (k.tier > (tiny ? 0 : quick ? 1 : 2)) continue;
    guarded(k.name, [&] {
      if (k.contexts.empty()) {
        run_scenario_case(*cpu, *gpu, k, tally);
      } else {
        run_decode_case(*cpu, *gpu, k, tally);
      }
    });
  }
  guarded("cuda graph", [&] { check::run_graph_cases(*cpu, *gpu, tally); });
  guarded("device guards", [&] { check::run_guard_cases(*gpu, tally); });
  for (const check::ApiCase& k : check::api_cases()) {
    if (k.tier > (tiny ? 0 : quick ? 1 : 2)) continue;
    guarded(k.name, [&] { k.run(*cpu, *gpu, tally); });
  }
  std::cout << tally.passed << " passed, " << tally.failed << " failed\n";
  return tally.failed == 0 ? kExitOk : kExitFailure;
#else
  print_error("check", "this build has no cuda backend (configure with STEP5_CUDA=ON)");
  return kExitFailure;
#endif
}

}  // namespace step5::tool
