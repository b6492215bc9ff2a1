// LayerSession: one layer's cache on the backend's device, a shuffled block
// allocation, and the oracle histories of every request.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/check.h"
#include "step5/numerics.h"
#include "step5/testing/device_memory.h"
#include "step5/testing/sim.h"
#include "step5/testing/step_buffers.h"
#include "step5/testing/step_tensors.h"

namespace step5::sim {

namespace {

using detail::require;
using Clock = std::chrono::steady_clock;

// Blocks beyond what the requests can use, so the highest block ids are not
// always the ones in use.
constexpr int64_t kSpareBlocks = 3;

// The cache starts as large finite garbage (bf16 0x5a5a ~ 1.5e16, fp8 0x5a
// = 20): a backend that reads a slot it never wrote gets a result dominated
// by it and fails the check, while kernels that multiply masked
// probabilities (exactly 0) by stale values still see no NaN, as in an
// engine that reuses blocks.
constexpr uint8_t kCacheGarbage = 0x5a;
// Outputs start as NaN (bf16 0xffff) and selections as an impossible region
// id (0x7f7f7f7f), so an element the backend never wrote fails the check.
constexpr uint8_t kOutputPoison = 0xff;
constexpr uint8_t kSelectedPoison = 0x7f;

std::vector<float> widen(const uint16_t* bits, size_t count) {
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

double session_memory_bytes(const LayerConfig& config, const SessionOptions& options) {
  const double blocks_per_request =
      std::ceil(static_cast<double>(options.max_context) / config.block_size);
  const double num_blocks = options.max_requests * blocks_per_request + kSpareBlocks;
  double bytes = num_blocks * static_cast<double>(cache_bytes_per_block(config));
  if (config.kind == LayerKind::csa) {
    bytes += static_cast<double>(ring_entry_bytes(config)) * options.max_requests;
  }
  return bytes;
}

struct LayerSession::State {
  Backend& backend;
  LayerConfig config;
  SessionOptions options;
  Device device;
  int32_t blocks_per_request = 0;
  int64_t num_blocks = 0;
  std::vector<int32_t> block_table;  // [max_requests, blocks_per_request]
  DeviceBuffer cache;
  DeviceBuffer ring;
  LayerCache views;
  std::vector<oracle::History> histories;

  State(Backend& b, const LayerConfig& c, const SessionOptions& o)
      : backend(b), config(c), options(o), device(b.device()) {}

  StepBuffers step_buffers(const std::vector<int32_t>& requests,
                           const std::vector<int32_t>& query_start_loc,
                           const std::vector<int32_t>& seq_lens, int64_t output_rows) const {
    const auto rs = static_cast<int32_t>(requests.size());
    require(query_start_loc.size() == requests.size() + 1 && seq_lens.size() == requests.size(),
            ErrorCode::invalid_argument,
            "sim step: expected query_start_loc [Rs+1] and seq_lens [Rs] for Rs=", rs,
            " requests, got ", query_start_loc.size(), " and ", seq_lens.size());
    // Distinct ids, found in O(Rs log Rs): a step costs nothing per request
    // it does not touch.
    std::vector<int32_t> sorted = requests;
    std::sort(sorted.begin(), sorted.end());
    const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
    StepHost host;
    host.query_start_loc = query_start_loc;
    host.seq_lens = seq_lens;
    host.ring_index = requests;
    host.max_blocks = blocks_per_request;
    const int32_t B = config.block_size;
    for (int32_t r = 0; r < rs; ++r) {
      const int32_t id = requests[static_cast<size_t>(r)];
      require(id >= 0 && id < options.max_requests && (twice == sorted.end() || *twice != id),
              ErrorCode::invalid_argument, "sim step: request[", r,
              "] expected a distinct id in 0..", options.max_requests - 1, ", got ", id);
      const int32_t begin = query_start_loc[static_cast<size_t>(r)];
      const int32_t end = query_start_loc[static_cast<size_t>(r) + 1];
      const int32_t len = seq_lens[static_cast<size_t>(r)];
      const int64_t held = histories[static_cast<size_t>(id)].length;
      require(begin <= end && end - begin <= len && len - (end - begin) <= held &&
                  len <= int64_t{blocks_per_request} * B,
              ErrorCode::invalid_argument, "sim step: request ", id, " expected 0 <= query_len (",
              end - begin, ") <= seq_len (", len, ") <= capacity (",
              int64_t{blocks_per_request} * B, ") starting at most at its length (", held, ")");
      const int32_t* row =
          block_table.data() + static_cast<size_t>(id) * static_cast<size_t>(blocks_per_request);
      host.block_table.insert(host.block_table.end(), row, row + blocks_per_request);
      for (int32_t p = len - (end - begin); p < len; ++p) {
        host.slot_mapping.push_back(int64_t{row[p / B]} * B + p % B);
      }
    }
    // Padding requests as vLLM appends them: no rows, length 0, and entries
    // nothing may read (ring 0, possibly a live request's; blocks 0).
    for (int32_t i = 0; i < options.padding_requests && rs > 0; ++i) {
      host.query_start_loc.push_back(host.query_start_loc.back());
      host.seq_lens.push_back(0);
      host.ring_index.push_back(0);
      host.block_table.insert(host.block_table.end(), static_cast<size_t>(blocks_per_request), 0);
    }
    return StepBuffers(device, std::move(host), output_rows);
  }

  // Upper bounds of the step's lengths for the planner (seq_lens_slack).
  void bound_lengths(StepBuffers& step, std::vector<int32_t>& bounds) const {
    if (options.seq_lens_slack <= 0) return;
    const int64_t capacity = int64_t{blocks_per_request} * config.block_size;
    bounds = step.host.seq_lens;
    for (int32_t& len : bounds) {
      len =
          static_cast<int32_t>(std::min<int64_t>(capacity, int64_t{len} + options.seq_lens_slack));
    }
    step.desc.host_seq_lens = bounds.data();
    step.desc.seq_lens_upper_bound = true;
  }

  void update_histories(const std::vector<int32_t>& requests,
                        const std::vector<int32_t>& query_start_loc,
                        const std::vector<int32_t>& seq_lens, const uint16_t* key,
                        const uint16_t* value, const uint16_t* index_key, const float* index_z) {
    const auto kv =
        static_cast<size_t>(config.num_kv_heads) * static_cast<size_t>(config.head_size);
    const auto di = static_cast<size_t>(config.index_dim);
    const bool csa = config.kind == LayerKind::csa;
    for (size_t r = 0; r < requests.size(); ++r) {
      oracle::History& history = histories[static_cast<size_t>(requests[r])];
      const int32_t begin = query_start_loc[r];
      const int32_t end = query_start_loc[r + 1];
      const int32_t start = seq_lens[r] - (end - begin);
      history.truncate(config, start);
      for (int32_t t = begin; t < end; ++t) {
        const auto row = static_cast<size_t>(t);
        const std::vector<float> k = widen(key + row * kv, kv);
        const std::vector<float> v = widen(value + row * kv, kv);
        const std::vector<float> ik = csa ? widen(index_key + row * di, di) : std::vector<float>();
        history.write(config, start + (t - begin), k.data(), v.data(), csa ? ik.data() : nullptr,
                      csa ? index_z[row] : 0.0f);
      }
    }
  }

  // Dequantized summaries of the closed regions of each request, read back
  // from the summary cache block by block.
  void read_summaries(const std::vector<int32_t>& requests, const std::vector<int32_t>& seq_lens,
                      StepOutput& out) const {
    const auto di = static_cast<size_t>(config.index_dim);
    const size_t elem = dtype_size(config.summary_dtype);
    const int32_t regions_per_block = config.block_size / kRegionSize;
    out.closed.resize(requests.size());
    out.max_closed = 0;
    for (size_t r = 0; r < requests.size(); ++r) {
      out.closed[r] = seq_lens[r] / kRegionSize;
      out.max_closed = std::max(out.max_closed, out.closed[r]);
    }
    out.summary.assign(requests.size() * static_cast<size_t>(out.max_closed) * di, 0.0f);
    std::vector<uint8_t> bytes(summary_bytes_per_block(config));
    for (size_t r = 0; r < requests.size(); ++r) {
      const int32_t* row = block_table.data() + static_cast<size_t>(requests[r]) *
                                                    static_cast<size_t>(blocks_per_request);
      for (int32_t j = 0; j < out.closed[r]; ++j) {
        const int32_t slot = j % regions_per_block;
        if (slot == 0 || j == 0) {
          const auto block = static_cast<size_t>(row[j / regions_per_block]);
          cache.download(bytes.data(), bytes.size(),
                         block * static_cast<size_t>(views.summaries.block_stride) +
                             kv_bytes_per_block(config));
        }
        float* dst = out.summary.data() +
                     (r * static_cast<size_t>(out.max_closed) + static_cast<size_t>(j)) * di;
        const uint8_t* src = bytes.data() + static_cast<size_t>(slot) *
                                                static_cast<size_t>(views.summaries.region_stride);
        for (size_t d = 0; d < di; ++d) {
          if (config.summary_dtype == DType::bf16) {
            uint16_t b;
            std::memcpy(&b, src + d * elem, sizeof b);
            dst[d] = bf16_to_float(b);
          } else {
            dst[d] = fp8_e4m3_to_float(src[d]);
          }
        }
      }
    }
  }
};

LayerSession::LayerSession(Backend& backend, const LayerConfig& config,
                           const SessionOptions& options)
    : state_(std::make_unique<State>(backend, config, options)) {
  validate_config(config);
  require(options.max_requests >= 1 && options.max_context >= 1 && options.padding_rows >= 0,
          ErrorCode::invalid_argument,
          "sim session: expected max_requests >= 1, max_context >= 1, padding_rows >= 0, got ",
          options.max_requests, ", ", options.max_context, ", ", options.padding_rows);
  State& s = *state_;
  s.blocks_per_request =
      static_cast<int32_t>((options.max_context + config.block_size - 1) / config.block_size);
  s.num_blocks = int64_t{options.max_requests} * s.blocks_per_request + kSpareBlocks;
  std::vector<int32_t> ids(static_cast<size_t>(s.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937_64 rng(options.seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  ids.resize(static_cast<size_t>(options.max_requests) * static_cast<size_t>(s.blocks_per_request));
  s.block_table = std::move(ids);

  const auto block_stride = static_cast<int64_t>(cache_bytes_per_block(config));
  s.cache = DeviceBuffer(s.device, static_cast<size_t>(block_stride * s.num_blocks));
  s.cache.fill(kCacheGarbage);
  const size_t ring_bytes =
      config.kind == LayerKind::csa
          ? ring_entry_bytes(config) * static_cast<size_t>(options.max_requests)
          : 0;
  s.ring = DeviceBuffer(s.device, ring_bytes);
  s.ring.fill(kCacheGarbage);
  s.views = packed_layer_cache(config, s.cache.data(), s.num_blocks, block_stride, s.ring.data(),
                               options.max_requests, s.device);
  s.histories.resize(static_cast<size_t>(options.max_requests));
}

LayerSession::~LayerSession() = default;

const LayerConfig& LayerSession::config() const {
  return state_->config;
}

const oracle::History& LayerSession::history(int32_t request) const {
  require(request >= 0 && request < state_->options.max_requests, ErrorCode::out_of_range,
          "sim session: request expected 0..", state_->options.max_requests - 1, ", got ", request);
  return state_->histories[static_cast<size_t>(request)];
}

void LayerSession::write_history(int32_t request, int64_t length, const uint16_t* key,
                                 const uint16_t* value, const uint16_t* index_key,
                                 const float* index_z) {
  State& s = *state_;
  const LayerConfig& c = s.config;
  require(request >= 0 && request < s.options.max_requests && length >= 0,
          ErrorCode::invalid_argument, "sim write_history: expected request 0..",
          s.options.max_requests - 1, " and length >= 0, got ", request, ", ", length);
  s.histories[static_cast<size_t>(request)].truncate(c, 0);
  if (length == 0) return;
  const std::vector<int32_t> requests{request};
  const std::vector<int32_t> qsl{0, static_cast<int32_t>(length)};
  const std::vector<int32_t> lens{static_cast<int32_t>(length)};
  StepBuffers step = s.step_buffers(requests, qsl, lens, 0);
  const auto rows = static_cast<size_t>(length);
  const size_t kv = static_cast<size_t>(c.num_kv_heads) * static_cast<size_t>(c.head_size);
  InputTensor k(s.device, "key", key, rows * kv, rows * kv, {length, c.num_kv_heads, c.head_size});
  InputTensor v(s.device, "value", value, rows * kv, rows * kv,
                {length, c.num_kv_heads, c.head_size});
  const StepPlan plan = s.backend.plan(step.desc, {c});
  DeviceBuffer workspace(s.device, plan.workspace_bytes());
  s.backend.prepare_step(plan, {workspace.data(), plan.workspace_bytes()}, nullptr);
  s.backend.write_kv(c, step.desc, plan, k.view, v.view, s.views.kv, nullptr);
  if (c.kind == LayerKind::csa) {
    const auto di = static_cast<size_t>(c.index_dim);
    InputTensor ik(s.device, "index_key", index_key, rows * di, rows * di, {length, c.index_dim});
    InputTensor iz(s.device, "index_z", index_z, rows, rows, {length});
    s.backend.update_summaries(c, step.desc, plan, ik.view, iz.view, s.views, nullptr);
  }
  synchronize(s.device);
  s.update_histories(requests, qsl, lens, key, value, index_key, index_z);
}

StepOutput LayerSession::run(const StepInput& in) {
  State& s = *state_;
  const LayerConfig& c = s.config;
  const int64_t n = in.num_tokens();
  const bool csa = c.kind == LayerKind::csa;
  const int64_t rows = n + s.options.padding_rows;
  StepBuffers step = s.step_buffers(in.request, in.query_start_loc, in.seq_lens, rows);
  const int H = c.num_heads, G = c.num_kv_heads, D = c.head_size;
  const StepTensors t(s.device, c, in);
  // Element counts in size_t: validate_config bounds every factor, and no
  // product is formed in int.
  const auto un = static_cast<size_t>(n);
  const size_t hd = static_cast<size_t>(H) * static_cast<size_t>(D);

  const size_t out_elems = static_cast<size_t>(rows) * hd;
  DeviceBuffer output(s.device, out_elems * 2);
  output.fill(kOutputPoison);
  const size_t sel_elems = csa ? un * static_cast<size_t>(G) * static_cast<size_t>(c.topk) : 0;
  DeviceBuffer selected(s.device, sel_elems * 4);
  selected.fill(kSelectedPoison);
  LayerOutputs outs;
  outs.output = TensorView::contiguous(output.data(), DType::bf16, {rows, H, D}, s.device);
  if (csa) {
    outs.selected = TensorView::contiguous(selected.data(), DType::i32, {n, G, c.topk}, s.device);
  }

  std::vector<int32_t> bounds;
  s.bound_lengths(step, bounds);
  PlanOptions plan_options;
  if (s.options.max_score_bytes > 0) plan_options.max_score_bytes = s.options.max_score_bytes;
  plan_options.tile_attention = s.options.tile_attention;
  plan_options.tile_union_crossover = s.options.tile_union_crossover;
  const Clock::time_point t0 = Clock::now();
  const StepPlan plan = s.backend.plan(step.desc, {c}, plan_options);
  const Clock::time_point t1 = Clock::now();
  DeviceBuffer workspace(s.device, plan.workspace_bytes());
  const Workspace ws{workspace.data(), plan.workspace_bytes()};
  const Clock::time_point t2 = Clock::now();
  s.backend.prepare_step(plan, ws, nullptr);
  const ForwardFlags flags = s.options.flags;
  // The ops an engine runs itself before attention, when it says so.
  if (has_flag(flags, ForwardFlags::skip_kv_write) && n > 0) {
    s.backend.write_kv(c, step.desc.slot_mapping, t.key.view, t.value.view, s.views.kv, nullptr);
  }
  if (csa && has_flag(flags, ForwardFlags::skip_summary_update)) {
    s.backend.update_summaries(c, step.desc, plan, t.index_key.view, t.index_z.view, s.views,
                               nullptr);
  }
  if (csa) {
    CsaInputs inputs = t.csa(flags);
    // What the forward leaves out, it must not need.
    if (has_flag(flags, ForwardFlags::skip_kv_write)) inputs.key = inputs.value = TensorView{};
    if (has_flag(flags, ForwardFlags::skip_summary_update)) {
      inputs.index_key = inputs.index_z = TensorView{};
    }
    s.backend.forward_csa(c, step.desc, plan, inputs, s.views, outs, ws, nullptr);
  } else {
    SwaInputs inputs = t.swa(flags);
    if (has_flag(flags, ForwardFlags::skip_kv_write)) inputs.key = inputs.value = TensorView{};
    s.backend.forward_swa(c, step.desc, plan, inputs, s.views.kv, outs, ws, nullptr);
  }
  synchronize(s.device);
  const Clock::time_point t3 = Clock::now();

  StepOutput result;
  result.seconds = seconds_between(t0, t1) + seconds_between(t2, t3);
  result.kind = plan.kind;
  result.padding_rows = s.options.padding_rows;
  std::vector<uint16_t> all = output.to_vector<uint16_t>(out_elems);
  const uint16_t padding_bits =
      has_flag(flags, ForwardFlags::skip_padding_zero) ? uint16_t{0xffff} : uint16_t{0};
  result.padding_zero = std::all_of(all.begin() + static_cast<std::ptrdiff_t>(un * hd), all.end(),
                                    [padding_bits](uint16_t b) { return b == padding_bits; });
  all.resize(un * hd);
  result.output = std::move(all);
  s.update_histories(in.request, in.query_start_loc, in.seq_lens, in.key.data(), in.value.data(),
                     csa ? in.index_key.data() : nullptr, csa ? in.index_z.data() : nullptr);
  if (csa) {
    result.selected = selected.to_vector<int32_t>(sel_elems);
    s.read_summaries(in.request, in.seq_lens, result);
  }
  return result;
}

}  // namespace step5::sim
