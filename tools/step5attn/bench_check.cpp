#include "step5attn/bench_check.h"

#include <cmath>
#include <ostream>
#include <random>
#include <sstream>
#include <vector>

#include "step5/numerics.h"
#include "step5/testing/device_memory.h"
#include "step5/testing/json.h"
#include "step5attn/bench_workload.h"

namespace step5::tool::bench {
namespace {

struct CheckSpec {
  const char* name;
  LayerKind kind;
  DType kv;
  int heads, groups, dim;
  std::vector<int32_t> seq_lens;
  std::vector<int32_t> query_lens;
};

// Host twin of cuda_testing::fill_cache_random's byte pattern: finite as bf16 pairs
// and as e4m3 bytes.
void fill_safe(std::vector<uint8_t>& bytes, std::mt19937_64& rng) {
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
    const uint64_t r = rng();
    bytes[i] = static_cast<uint8_t>(r & 0xbfu);
    bytes[i + 1] = static_cast<uint8_t>(((r >> 8) & 0x80u) | 0x3cu | ((r >> 16) & 3u));
  }
}

std::vector<uint16_t> random_bf16(size_t count, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint16_t> out(count);
  for (auto& x : out) x = float_to_bf16(u(rng));
  return out;
}

// The same step's views on one device.
struct Side {
  explicit Side(Device d) : device(d) {}
  Device device;
  sim::DeviceBuffer qsl, seq, table, slots, ring, query, gate, selected, output, pool;
  StepDesc step;
  KVCacheView kv;
  TensorView q, g, sel, out;
};

template <class T>
sim::DeviceBuffer put(Device device, const std::vector<T>& host) {
  return sim::DeviceBuffer::from(device, host);
}

void build_side(Side& s, const LayerConfig& c, const StepHost& h, const std::vector<uint16_t>& q,
                const std::vector<uint16_t>& gate, const std::vector<int32_t>& sel,
                const std::vector<uint8_t>& pool, int64_t num_blocks) {
  const Device d = s.device;
  const int64_t n = h.num_tokens, H = c.num_heads, G = c.num_kv_heads, D = c.head_size;
  s.qsl = put(d, h.query_start_loc);
  s.seq = put(d, h.seq_lens);
  s.table = put(d, h.block_table);
  s.slots = put(d, h.slot_mapping);
  s.ring = put(d, h.ring_index);
  s.query = put(d, q);
  s.gate = put(d, gate);
  s.pool = put(d, pool);
  s.output = sim::DeviceBuffer(d, static_cast<size_t>(n * H * D) * 2);
  s.step.num_tokens = n;
  s.step.num_requests = h.num_requests;
  s.step.query_start_loc =
      TensorView::contiguous(s.qsl.data(), DType::i32, {h.num_requests + 1}, d);
  s.step.seq_lens = TensorView::contiguous(s.seq.data(), DType::i32, {h.num_requests}, d);
  s.step.block_table =
      TensorView::contiguous(s.table.data(), DType::i32, {h.num_requests, h.max_blocks}, d);
  s.step.slot_mapping = TensorView::contiguous(s.slots.data(), DType::i64, {n}, d);
  s.step.ring_index = TensorView::contiguous(s.ring.data(), DType::i32, {h.num_requests}, d);
  s.step.host_query_start_loc = h.query_start_loc.data();
  s.step.host_seq_lens = h.seq_lens.data();
  s.step.host_block_table = h.block_table.data();
  s.step.host_slot_mapping = h.slot_mapping.data();
  s.step.host_ring_index = h.ring_index.data();
  s.kv = packed_layer_cache(c, s.pool.data(), num_blocks,
                            static_cast<int64_t>(cache_bytes_per_block(c)), nullptr, 0, d)
             .kv;
  s.q = TensorView::contiguous(s.query.data(), DType::bf16, {n, H, D}, d);
  s.g = TensorView::contiguous(s.gate.data(), DType::bf16, {n, H}, d);
  s.out = TensorView::contiguous(s.output.data(), DType::bf16, {n, H, D}, d);
  if (c.kind == LayerKind::csa) {
    s.selected = put(d, sel);
    s.sel = TensorView::contiguous(s.selected.data(), DType::i32, {n, G, c.topk}, d);
  }
}

std::vector<uint16_t> run_side(Backend& b, Side& s, const LayerConfig& c) {
  const StepPlan plan = b.plan(s.step, {c});
  if (c.kind == LayerKind::csa) {
    b.sparse_attention(c, s.step, plan, RowRange{0, s.step.num_tokens}, s.q, s.sel, s.g, s.kv,
                       s.out, nullptr);
  } else {
    b.window_attention(c, s.step, plan, s.q, s.g, s.kv, s.out, nullptr);
  }
  sim::synchronize(s.device);
  return s.output.to_vector<uint16_t>(static_cast<size_t>(s.out.numel()));
}

}  // namespace

bool run_attention_checks(Backend& cpu, Backend& gpu, std::ostream& out, std::string& json) {
  // Uniform verify steps (12 rows: split-KV + combine) and a mixed step
  // (38 rows: one split, direct epilogue); contexts past K regions.
  const std::vector<int32_t> lens = {4700, 5203, 6001};
  const std::vector<CheckSpec> specs = {
      {"csa bf16 H64 G8 verify", LayerKind::csa, DType::bf16, 64, 8, 192, lens, {4, 4, 4}},
      {"csa fp8 H64 G8 verify", LayerKind::csa, DType::fp8_e4m3, 64, 8, 192, lens, {4, 4, 4}},
      {"csa bf16 H64 G8 mixed", LayerKind::csa, DType::bf16, 64, 8, 192, {4137, 5100}, {37, 1}},
      {"csa bf16 H16 G1 decode", LayerKind::csa, DType::bf16, 16, 1, 192, lens, {1, 1, 1}},
      {"swa bf16 H64 G8 verify", LayerKind::swa, DType::bf16, 64, 8, 192, lens, {4, 4, 4}},
      {"swa fp8 H64 G8 mixed", LayerKind::swa, DType::fp8_e4m3, 64, 8, 192, {300, 2900}, {90, 1}},
      {"swa bf16 H8 G8 D128 decode", LayerKind::swa, DType::bf16, 8, 8, 128, {7, 1000}, {1, 1}},
  };
  std::mt19937_64 rng(2026);
  bool all_ok = true;
  for (const CheckSpec& spec : specs) {
    LayerConfig c;
    c.kind = spec.kind;
    c.num_heads = spec.heads;
    c.num_kv_heads = spec.groups;
    c.head_size = spec.dim;
    c.kv_dtype = spec.kv;
    if (spec.kv == DType::fp8_e4m3) {
      c.k_scale = 0.75f;
      c.v_scale = 1.25f;
    }
    int64_t blocks = 0;
    for (int32_t len : spec.seq_lens) blocks += (len + c.block_size - 1) / c.block_size;
    const StepHost h = make_step(c, spec.seq_lens, spec.query_lens, blocks, rng);
    std::vector<uint8_t> pool(static_cast<size_t>(blocks) * cache_bytes_per_block(c));
    fill_safe(pool, rng);
    const auto q = random_bf16(static_cast<size_t>(h.num_tokens) * c.num_heads * c.head_size, rng);
    const auto gate = random_bf16(static_cast<size_t>(h.num_tokens) * c.num_heads, rng);
    const std::vector<int32_t> sel =
        c.kind == LayerKind::csa ? make_selection(c, h, false, rng) : std::vector<int32_t>{};
    Side host(Device::host);
    Side dev(Device::cuda);
    build_side(host, c, h, q, gate, sel, pool, blocks);
    build_side(dev, c, h, q, gate, sel, pool, blocks);
    const auto ref = run_side(cpu, host, c);
    const auto got = run_side(gpu, dev, c);
    double diff2 = 0, ref2 = 0, max_abs = 0;
    bool finite = true;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double a = bf16_to_float(got[i]), b = bf16_to_float(ref[i]);
      finite = finite && std::isfinite(a);
      diff2 += (a - b) * (a - b);
      ref2 += b * b;
      max_abs = std::max(max_abs, std::fabs(a - b));
    }
    const double rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
    const bool ok = finite && rel <= 8e-3 && max_abs <= 3e-2;
    all_ok = all_ok && ok;
    out << "  check " << (ok ? "ok  " : "FAIL") << "  " << spec.name << "  rows " << h.num_tokens
        << "  rel_l2 " << rel << "  max_abs " << max_abs << "\n";
    std::ostringstream js;
    js << (json.empty() ? "" : ",\n    ") << "{\"name\": " << json::quote(spec.name)
       << ", \"rows\": " << h.num_tokens << ", \"rel_l2\": " << json::number(rel)
       << ", \"max_abs\": " << json::number(max_abs) << ", \"ok\": " << (ok ? "true" : "false")
       << "}";
    json += js.str();
  }
  return all_ok;
}

}  // namespace step5::tool::bench
