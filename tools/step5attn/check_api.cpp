// `step5attn check` cases of the engine-facing API (issue 7), each on the
// cuda backend against the cpu reference: lengths planned from host upper
// bounds, padding requests, the forward flags (the session runs write_kv
// from slots and update_summaries itself where the flags skip them), the
// slot-only write_kv, two layers in one BLNHC cache, and the static
// workspace bound against the cuda schedules.
#if defined(STEP5_HAVE_CUDA)
#include <algorithm>
#include <cmath>
#include <random>

#include "step5/numerics.h"
#include "step5/testing/device_memory.h"
#include "step5/testing/multi_layer.h"
#include "step5attn/check.h"

namespace step5::tool::check {

namespace {

constexpr Device kGpu = Device::cuda;

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

// A serving scenario on both backends under `behaviour` (SessionOptions'
// engine fields), every step compared.
void run_session(Backend& cpu, Backend& cuda, const std::string& name, const LayerConfig& c,
                 const sim::SessionOptions& behaviour, Tally& tally) {
  sim::ScenarioOptions o;
  o.requests = 3;
  o.min_prompt = 150;
  o.max_prompt = 450;
  sim::Scenario sc(c, o);
  sim::SessionOptions opt = behaviour;
  opt.max_requests = o.requests;
  opt.max_context = sc.max_context() + 16;
  opt.padding_rows = 2;
  sim::LayerSession a(cpu, c, opt), b(cuda, c, opt);
  for (int i = 0; !sc.done(); ++i) {
    const sim::ScenarioStep step = sc.next();
    const sim::StepOutput want = a.run(step.input);
    const sim::StepOutput got = b.run(step.input);
    const std::string why = compare_step(b, step.input, got, want, sim::default_tolerance(c));
    if (!why.empty()) {
      tally.fail(name, concat("step ", i, " (", step.label, "): ", why));
      return;
    }
  }
  tally.pass();
}

sim::SessionOptions behaviour(int32_t slack, int32_t padding_requests, ForwardFlags flags) {
  sim::SessionOptions o;
  o.seq_lens_slack = slack;
  o.padding_requests = padding_requests;
  o.flags = flags;
  return o;
}

constexpr ForwardFlags kAllFlags = ForwardFlags::skip_kv_write | ForwardFlags::skip_summary_update |
                                   ForwardFlags::skip_padding_zero;

void upper_bounds_csa(Backend& cpu, Backend& cuda, Tally& tally) {
  const DType bf = DType::bf16, f8 = DType::fp8_e4m3;
  run_session(cpu, cuda, "api: upper-bound seq_lens csa mtp=3", csa(8, 8, 192, 64, 16, f8, bf, 3),
              behaviour(3, 0, ForwardFlags::none), tally);
}

void upper_bounds_swa(Backend& cpu, Backend& cuda, Tally& tally) {
  run_session(cpu, cuda, "api: upper-bound seq_lens swa mtp=3",
              swa(8, 8, 192, 16, 128, DType::fp8_e4m3, 3), behaviour(3, 0, ForwardFlags::none),
              tally);
}

void padding_requests_csa(Backend& cpu, Backend& cuda, Tally& tally) {
  run_session(cpu, cuda, "api: padding requests csa mtp=3",
              csa(8, 8, 192, 64, 16, DType::bf16, DType::fp8_e4m3, 3),
              behaviour(0, 2, ForwardFlags::none), tally);
}

void flags_csa(Backend& cpu, Backend& cuda, Tally& tally) {
  const DType bf = DType::bf16, f8 = DType::fp8_e4m3;
  const LayerConfig c = csa(8, 8, 192, 64, 16, bf, f8, 3);
  run_session(cpu, cuda, "api: skip_kv_write csa", c, behaviour(0, 0, ForwardFlags::skip_kv_write),
              tally);
  run_session(cpu, cuda, "api: skip_summary_update csa", c,
              behaviour(0, 0, ForwardFlags::skip_summary_update), tally);
  run_session(cpu, cuda, "api: skip_padding_zero csa", c,
              behaviour(0, 1, ForwardFlags::skip_padding_zero), tally);
}

void flags_swa(Backend& cpu, Backend& cuda, Tally& tally) {
  run_session(cpu, cuda, "api: all flags swa", swa(8, 8, 192, 64, 512, DType::bf16, 0),
              behaviour(0, 1, kAllFlags), tally);
}

void everything_tiny(Backend& cpu, Backend& cuda, Tally& tally) {
  run_session(cpu, cuda, "api: bounds + padding requests + all flags csa G1 D128 B16 K4",
              csa(1, 1, 128, 16, 4, DType::bf16, DType::fp8_e4m3, 2), behaviour(2, 1, kAllFlags),
              tally);
}

// write_kv(slot_mapping only): the cuda cache equals the cpu cache byte for
// byte; slots of -1 and (cuda only) past the cache are skipped.
void write_kv_slots(Backend& cpu, Backend& cuda, Tally& tally) {
  for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
    const LayerConfig c = csa(8, 8, 192, 64, 64, kv, DType::fp8_e4m3, 0);
    const int64_t blocks = 9, n = 300, G = c.num_kv_heads, D = c.head_size;
    const auto bytes = cache_bytes_per_block(c) * static_cast<size_t>(blocks);
    std::mt19937_64 rng(41);
    std::vector<uint16_t> key(static_cast<size_t>(n * G * D)), value(key.size());
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (auto& x : key) x = float_to_bf16(normal(rng));
    for (auto& x : value) x = float_to_bf16(normal(rng));
    std::vector<int64_t> slots(static_cast<size_t>(n));
    std::vector<int64_t> perm(static_cast<size_t>(blocks * c.block_size));
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t t = 0; t < n; ++t) slots[static_cast<size_t>(t)] = t % 7 == 3 ? -1 : perm[t];
    std::vector<int64_t> cuda_slots = slots;
    cuda_slots[5] = blocks * c.block_size + 3;  // past the cache: skipped on the device
    slots[5] = -1;                              // the cpu raises instead, so leave it out
    sim::DeviceBuffer host_cache(Device::host, bytes), dev_cache(kGpu, bytes);
    host_cache.fill(0x5a);
    dev_cache.fill(0x5a);
    const auto stride = static_cast<int64_t>(cache_bytes_per_block(c));
    const LayerCache hc =
        packed_layer_cache(c, host_cache.data(), blocks, stride, nullptr, 0, Device::host);
    const LayerCache dc = packed_layer_cache(c, dev_cache.data(), blocks, stride, nullptr, 0, kGpu);
    sim::DeviceBuffer dk = sim::DeviceBuffer::from(kGpu, key);
    sim::DeviceBuffer dv = sim::DeviceBuffer::from(kGpu, value);
    sim::DeviceBuffer ds = sim::DeviceBuffer::from(kGpu, cuda_slots);
    cpu.write_kv(c, TensorView::contiguous(slots.data(), DType::i64, {n}),
                 TensorView::contiguous(key.data(), DType::bf16, {n, G, D}),
                 TensorView::contiguous(value.data(), DType::bf16, {n, G, D}), hc.kv, nullptr);
    cuda.write_kv(c, TensorView::contiguous(ds.data(), DType::i64, {n}, kGpu),
                  TensorView::contiguous(dk.data(), DType::bf16, {n, G, D}, kGpu),
                  TensorView::contiguous(dv.data(), DType::bf16, {n, G, D}, kGpu), dc.kv, nullptr);
    sim::synchronize(kGpu);
    if (host_cache.to_vector<uint8_t>(bytes) != dev_cache.to_vector<uint8_t>(bytes)) {
      tally.fail("api: write_kv from slot_mapping",
                 concat("kv ", dtype_name(kv), ": cuda cache bytes differ from cpu"));
      return;
    }
  }
  tally.pass();
}

// rel L2 and max abs of two bf16 arrays; NaN fails.
std::string compare_bits(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                         const sim::Tolerance& tol) {
  if (got.size() != want.size()) return concat("sizes ", got.size(), " vs ", want.size());
  double diff = 0, norm = 0, max_abs = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = bf16_to_float(got[i]), w = bf16_to_float(want[i]);
    if (std::isnan(g) || std::isnan(w)) return concat("NaN at element ", i);
    diff += (g - w) * (g - w);
    norm += w * w;
    max_abs = std::max(max_abs, std::fabs(g - w));
  }
  const double rel = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  if (rel > tol.rel_l2 || max_abs > tol.max_abs) {
    return concat("rel L2 ", rel, " (tol ", tol.rel_l2, "), max abs ", max_abs, " (tol ",
                  tol.max_abs, ")");
  }
  return "";
}

// A CSA and an SWA layer stepping together in one interleaved cache.
void blnhc_two_layers(Backend& cpu, Backend& cuda, Tally& tally) {
  for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
    const std::vector<LayerConfig> layers = sim::two_layer_model(16, kv);
    sim::MultiLayerOptions o;
    const auto want = sim::run_layers(cpu, layers, o);
    const auto got = sim::run_layers(cuda, layers, o);
    for (size_t i = 0; i < want.size(); ++i) {
      const std::string why =
          compare_bits(got[i], want[i], sim::default_tolerance(layers[i % layers.size()]));
      if (!why.empty()) {
        tally.fail("api: two layers in one BLNHC cache",
                   concat("kv ", dtype_name(kv), " step ", i / layers.size(), " layer ",
                          i % layers.size(), ": ", why));
        return;
      }
    }
  }
  tally.pass();
}

// Random steps within limits, planned on the cuda backend (its schedules
// and split scratch), each within workspace_bytes(limits).
void workspace_bound(Backend&, Backend& cuda, Tally& tally) {
  const std::vector<LayerConfig> layers{csa(8, 8, 192, 64, 512, DType::bf16, DType::fp8_e4m3, 3),
                                        swa(8, 8, 192, 64, 512, DType::bf16, 3)};
  const StepLimits limits{2048, 64, 32768};
  const int B = 64;
  const int32_t max_blocks = static_cast<int32_t>(limits.max_context / B);
  std::mt19937_64 rng(7);
  for (size_t score_bytes : {size_t{256} << 20, size_t{1} << 20}) {
    PlanOptions options;
    options.max_score_bytes = score_bytes;
    const size_t bound = cuda.workspace_bytes(layers, limits, options);
    for (int i = 0; i < 200; ++i) {
      const int32_t R = std::uniform_int_distribution<int32_t>(1, limits.max_requests)(rng);
      const bool decode = i % 3 == 0;
      std::vector<int32_t> qsl{0}, lens, table, rings;
      std::vector<int64_t> slots;
      int64_t budget = limits.max_tokens;
      for (int32_t r = 0; r < R; ++r) {
        const auto most = static_cast<int32_t>(std::min<int64_t>(budget, 600));
        const int32_t q =
            decode ? std::min(4, most) : std::uniform_int_distribution<int32_t>(0, most)(rng);
        budget -= q;
        const int32_t len = std::uniform_int_distribution<int32_t>(
            std::max(q, 1), static_cast<int32_t>(limits.max_context))(rng);
        qsl.push_back(qsl.back() + q);
        lens.push_back(len);
        rings.push_back(r);
        for (int32_t j = 0; j < max_blocks; ++j) table.push_back(r * max_blocks + j);
        for (int32_t p = len - q; p < len; ++p)
          slots.push_back(int64_t{r} * limits.max_context + p);
      }
      const int64_t n = qsl.back();
      StepDesc d;
      d.num_tokens = n;
      d.num_requests = R;
      // Host views stand in for the device ones: the plan reads only shapes
      // and host copies, and nothing runs.
      d.query_start_loc = TensorView::contiguous(qsl.data(), DType::i32, {R + 1}, kGpu);
      d.seq_lens = TensorView::contiguous(lens.data(), DType::i32, {R}, kGpu);
      d.block_table = TensorView::contiguous(table.data(), DType::i32, {R, max_blocks}, kGpu);
      d.slot_mapping = TensorView::contiguous(slots.data(), DType::i64, {n}, kGpu);
      d.ring_index = TensorView::contiguous(rings.data(), DType::i32, {R}, kGpu);
      d.host_query_start_loc = qsl.data();
      d.host_seq_lens = lens.data();
      d.seq_lens_upper_bound = i % 4 == 1;
      PlanOptions o = options;
      o.max_context = i % 2 ? limits.max_context : 0;
      const StepPlan plan = cuda.plan(d, layers, o);
      if (plan.workspace_bytes() > bound) {
        tally.fail("api: workspace bound (cuda schedules)",
                   concat("step ", i, " (n=", n, ", R=", R, ", ", step_kind_name(plan.kind),
                          ") needs ", plan.workspace_bytes(), " bytes, bound ", bound));
        return;
      }
    }
  }
  tally.pass();
}

}  // namespace

std::vector<ApiCase> api_cases() {
  return {
      {"api: bounds + padding requests + all flags (tiny)", 0, everything_tiny},
      {"api: upper-bound seq_lens csa", 1, upper_bounds_csa},
      {"api: upper-bound seq_lens swa", 2, upper_bounds_swa},
      {"api: padding requests csa", 2, padding_requests_csa},
      {"api: cuda graph decode with padding requests", 1, run_graph_padding_cases},
      {"api: forward flags csa", 2, flags_csa},
      {"api: forward flags swa", 2, flags_swa},
      {"api: write_kv from slot_mapping", 0, write_kv_slots},
      {"api: two layers in one BLNHC cache", 1, blnhc_two_layers},
      {"api: workspace bound (cuda schedules)", 1, workspace_bound},
  };
}

}  // namespace step5::tool::check
#endif
