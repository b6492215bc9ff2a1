#include "step5attn/soak_workload.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "step5/numerics.h"
#include "step5attn/layers.h"

namespace step5::tool::soak {

namespace {

// Short requests: prompts of 1..kShortPrompt tokens (fewer at small
// contexts), then kMinDecode..kMaxDecode decode/verify steps.
constexpr int64_t kShortPrompt = 2048;
constexpr int32_t kMinDecode = 4;
constexpr int32_t kMaxDecode = 64;
// Blocks no request can hold, so the highest ids are not always in use.
constexpr int64_t kSpareBlocks = 3;

// SPEC 2's reference layer, or the demo's reduced one; MTP k = 3 either way.
LayerConfig layer(LayerKind kind, bool spec_shapes, DType kv_dtype) {
  if (!spec_shapes) return reduced_layer(kind, 3, kv_dtype);
  LayerConfig c;
  c.kind = kind;
  c.spec_tokens = 3;
  c.kv_dtype = kv_dtype;
  if (kv_dtype == DType::fp8_e4m3) {
    // Powers of two: x / scale is exact on every backend, and two
    // different ones catch a backend that swaps or drops one.
    c.k_scale = 0.25f;
    c.v_scale = 0.125f;
  }
  return c;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

std::vector<LayerConfig> soak_layers(bool spec_shapes, DType kv_dtype) {
  return {layer(LayerKind::csa, spec_shapes, kv_dtype),
          layer(LayerKind::swa, spec_shapes, kv_dtype)};
}

bool ScheduledStep::rerunnable(int spec_tokens) const {
  if (write_only) return false;
  for (size_t r = 0; r + 1 < host.query_start_loc.size(); ++r) {
    if (host.query_start_loc[r + 1] - host.query_start_loc[r] > spec_tokens + 1) return false;
  }
  return true;
}

Workload::Workload(const std::vector<LayerConfig>& layers, const SoakOptions& options)
    : layers_(layers), options_(options), rng_(options.seed) {
  block_size_ = layers.front().block_size;
  spec_tokens_ = layers.front().spec_tokens;
  const int64_t per_step = spec_tokens_ + 1;
  // The long request grows by at most k + 1 per decode step, and a verify
  // step writes k + 1 rows past what it holds.
  const int64_t long_max = options.context + (options.steps + 1) * per_step;
  max_blocks_ = static_cast<int32_t>(ceil_div(long_max, block_size_));
  short_max_prompt_ = std::max<int64_t>(1, std::min(kShortPrompt, options.context));
  const int64_t short_max = short_max_prompt_ + (kMaxDecode + 1) * per_step;
  num_blocks_ =
      max_blocks_ + options.short_requests * ceil_div(short_max, block_size_) + kSpareBlocks;
  ring_entries_ = static_cast<int32_t>(options.short_requests + 1);

  free_blocks_.resize(static_cast<size_t>(num_blocks_));
  for (size_t i = 0; i < free_blocks_.size(); ++i) free_blocks_[i] = static_cast<int32_t>(i);
  std::shuffle(free_blocks_.begin(), free_blocks_.end(), rng_);
  block_used_before_.assign(free_blocks_.size(), 0);
  for (int32_t e = 0; e < ring_entries_; ++e) free_rings_.push_back(e);
  std::shuffle(free_rings_.begin(), free_rings_.end(), rng_);
  ring_used_before_.assign(free_rings_.size(), 0);

  std::normal_distribution<float> normal(0.0f, 1.0f);
  normal_table_.resize(size_t{1} << 16);
  for (uint16_t& x : normal_table_) x = float_to_bf16(normal(rng_));
  fast_state_ = rng_() | 1u;

  Request r;
  r.serial = 0;
  r.is_long = true;
  r.prompt = options.context;
  r.ring = free_rings_.back();
  free_rings_.pop_back();
  ring_used_before_[static_cast<size_t>(r.ring)] = 1;
  requests_.push_back(r);
}

int64_t Workload::max_step_tokens() const {
  return std::max<int64_t>(options_.chunk, (options_.short_requests + 1) * (spec_tokens_ + 1));
}

void Workload::grow(Request& request, int64_t length) {
  while (static_cast<int64_t>(request.blocks.size()) * block_size_ < length) {
    if (free_blocks_.empty()) {
      throw std::logic_error("soak: the block pool ran dry (a sizing bug)");
    }
    const int32_t id = free_blocks_.back();
    free_blocks_.pop_back();
    char& used = block_used_before_[static_cast<size_t>(id)];
    blocks_reused_ += used;
    used = 1;
    request.blocks.push_back(id);
  }
}

void Workload::maybe_start_short_request() {
  const auto live_short = static_cast<int64_t>(requests_.size()) - 1;
  if (live_short >= options_.short_requests || free_rings_.empty()) return;
  if (std::uniform_int_distribution<int>(0, 3)(rng_) != 0) return;
  Request r;
  r.serial = serial_++;
  r.prompt = std::uniform_int_distribution<int64_t>(1, short_max_prompt_)(rng_);
  r.decode_left = std::uniform_int_distribution<int32_t>(kMinDecode, kMaxDecode)(rng_);
  r.ring = free_rings_.back();
  free_rings_.pop_back();
  char& used = ring_used_before_[static_cast<size_t>(r.ring)];
  rings_reused_ += used;
  used = 1;
  requests_.push_back(std::move(r));
}

ScheduledStep Workload::next() {
  ScheduledStep step;
  std::vector<size_t> members;
  std::vector<int32_t> start, count;
  auto add = [&](size_t index, int64_t rows, bool decoding, bool verifying) {
    members.push_back(index);
    start.push_back(static_cast<int32_t>(requests_[index].length));
    count.push_back(static_cast<int32_t>(rows));
    step.decoding.push_back(decoding ? 1 : 0);
    step.verifying.push_back(verifying ? 1 : 0);
  };
  if (!long_prefill_done()) {
    const Request& r = requests_.front();
    const int64_t rows = std::min(options_.chunk, options_.context - r.length);
    step.write_only = r.length + rows < options_.context;
    step.label = step.write_only ? kContextStep : kPrefillStep;
    add(0, rows, false, false);
  } else {
    maybe_start_short_request();
    const bool verify = spec_tokens_ > 0 && std::bernoulli_distribution(0.5)(rng_);
    const int64_t rows = verify ? spec_tokens_ + 1 : 1;
    int64_t budget = options_.chunk;
    for (size_t i = 0; i < requests_.size(); ++i) {
      if (requests_[i].length < requests_[i].prompt) continue;
      add(i, rows, true, verify);
      budget -= rows;
    }
    bool prefill_rows = false;
    for (size_t i = 0; i < requests_.size() && budget > 0; ++i) {
      const int64_t left = requests_[i].prompt - requests_[i].length;
      if (left <= 0) continue;
      const int64_t take = std::min(left, budget);
      add(i, take, false, false);
      budget -= take;
      prefill_rows = true;
    }
    step.label = prefill_rows ? kMixedStep : verify ? kVerifyStep : kDecodeStep;
  }

  sim::StepHost& h = step.host;
  h.max_blocks = max_blocks_;
  h.query_start_loc.push_back(0);
  for (size_t m = 0; m < members.size(); ++m) {
    Request& r = requests_[members[m]];
    const int64_t end = int64_t{start[m]} + count[m];
    grow(r, end);
    step.serial.push_back(r.serial);
    h.query_start_loc.push_back(h.query_start_loc.back() + count[m]);
    h.seq_lens.push_back(static_cast<int32_t>(end));
    h.ring_index.push_back(r.ring);
    h.block_table.insert(h.block_table.end(), r.blocks.begin(), r.blocks.end());
    h.block_table.resize(h.block_table.size() + static_cast<size_t>(max_blocks_) - r.blocks.size(),
                         0);
    for (int64_t p = start[m]; p < end; ++p) {
      h.slot_mapping.push_back(
          int64_t{r.blocks[static_cast<size_t>(p / block_size_)]} * block_size_ + p % block_size_);
    }
  }
  fill_inputs(step);
  return step;
}

std::vector<int64_t> Workload::finish(const ScheduledStep& step) {
  std::uniform_int_distribution<int32_t> accepted(0, spec_tokens_);
  std::vector<int64_t> retired;
  for (size_t m = 0; m < step.serial.size(); ++m) {
    auto it = std::find_if(requests_.begin(), requests_.end(),
                           [&](const Request& r) { return r.serial == step.serial[m]; });
    const int32_t rows = step.host.query_start_loc[m + 1] - step.host.query_start_loc[m];
    const int32_t start = step.host.seq_lens[m] - rows;
    // Verify rows: the target model accepts 0..k drafts and adds its own
    // token; the next step starts there and rewrites the rejected positions.
    it->length = step.verifying[m] ? start + 1 + accepted(rng_) : start + rows;
    if (it->is_long || !step.decoding[m] || --it->decode_left > 0) continue;
    retired.push_back(it->serial);
    free_blocks_.insert(free_blocks_.end(), it->blocks.begin(), it->blocks.end());
    std::shuffle(free_blocks_.begin(), free_blocks_.end(), rng_);
    free_rings_.push_back(it->ring);
    std::shuffle(free_rings_.begin(), free_rings_.end(), rng_);
    requests_.erase(it);
  }
  return retired;
}

void Workload::fill_bf16(std::vector<uint16_t>& out, size_t count) {
  // xorshift64* into a table of bf16 normals: ~1 ns a value, so a 1M-token
  // context's K/V are drawn in seconds (std::normal_distribution would take
  // minutes).
  out.resize(count);
  size_t i = 0;
  while (i < count) {
    fast_state_ ^= fast_state_ >> 12;
    fast_state_ ^= fast_state_ << 25;
    fast_state_ ^= fast_state_ >> 27;
    uint64_t bits = fast_state_ * 0x2545F4914F6CDD1Dull;
    for (int j = 0; j < 4 && i < count; ++j, bits >>= 16) out[i++] = normal_table_[bits & 0xffff];
  }
}

void Workload::fill_inputs(ScheduledStep& step) {
  const auto n = static_cast<size_t>(step.num_tokens());
  std::vector<uint16_t> scratch;
  for (const LayerConfig& c : layers_) {
    sim::StepInput in;
    in.request = step.host.ring_index;
    in.query_start_loc = step.host.query_start_loc;
    in.seq_lens = step.host.seq_lens;
    const auto H = static_cast<size_t>(c.num_heads), G = static_cast<size_t>(c.num_kv_heads);
    const auto D = static_cast<size_t>(c.head_size);
    fill_bf16(in.key, n * G * D);
    fill_bf16(in.value, n * G * D);
    if (!step.write_only) {
      fill_bf16(in.query, n * H * D);
      fill_bf16(in.gate, n * H);
    }
    if (c.kind == LayerKind::csa) {
      const auto Di = static_cast<size_t>(c.index_dim), I = static_cast<size_t>(c.index_heads);
      fill_bf16(in.index_key, n * Di);
      fill_bf16(scratch, n);
      in.index_z.resize(n);
      for (size_t t = 0; t < n; ++t) in.index_z[t] = bf16_to_float(scratch[t]);
      if (!step.write_only) {
        fill_bf16(in.index_query, n * G * I * Di);
        fill_bf16(scratch, n * G * I);
        in.index_weight.resize(n * G * I);
        // |normal| / 2: positive weights of the indexer heads, O(1).
        for (size_t e = 0; e < scratch.size(); ++e) {
          in.index_weight[e] = 0.5f * std::fabs(bf16_to_float(scratch[e]));
        }
      }
    }
    step.inputs.push_back(std::move(in));
  }
}

}  // namespace step5::tool::soak
