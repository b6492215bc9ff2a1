// Random step inputs and the serving scenario.
#include <algorithm>

#include "core/check.h"
#include "step5/numerics.h"
#include "step5/testing/sim.h"

namespace step5::sim {

namespace {

using detail::require;

uint16_t bf16_normal(std::mt19937_64& rng, float stddev) {
  std::normal_distribution<float> normal(0.0f, stddev);
  return float_to_bf16(normal(rng));
}

void fill_normal(std::vector<uint16_t>& out, size_t count, std::mt19937_64& rng, float stddev) {
  out.resize(count);
  for (auto& x : out) x = bf16_normal(rng, stddev);
}

}  // namespace

StepInput random_step(const LayerConfig& c, std::mt19937_64& rng,
                      const std::vector<int32_t>& requests, const std::vector<int32_t>& start,
                      const std::vector<int32_t>& num_tokens, bool gate, bool correlated) {
  require(start.size() == requests.size() && num_tokens.size() == requests.size(),
          ErrorCode::invalid_argument, "random_step: expected start and num_tokens per request (",
          requests.size(), "), got ", start.size(), " and ", num_tokens.size());
  StepInput in;
  in.request = requests;
  in.query_start_loc.push_back(0);
  for (size_t r = 0; r < requests.size(); ++r) {
    require(start[r] >= 0 && num_tokens[r] >= 0, ErrorCode::invalid_argument,
            "random_step: expected start >= 0 and num_tokens >= 0, got ", start[r], " and ",
            num_tokens[r]);
    in.query_start_loc.push_back(in.query_start_loc.back() + num_tokens[r]);
    in.seq_lens.push_back(start[r] + num_tokens[r]);
  }
  const auto n = static_cast<size_t>(in.num_tokens());
  const auto H = static_cast<size_t>(c.num_heads), G = static_cast<size_t>(c.num_kv_heads);
  const auto D = static_cast<size_t>(c.head_size);
  // q, k ~ N(0, 1): with the 1/sqrt(D) scale the logits have unit variance,
  // so the softmax is neither uniform nor one-hot.
  fill_normal(in.query, n * H * D, rng, 1.0f);
  fill_normal(in.key, n * G * D, rng, 1.0f);
  fill_normal(in.value, n * G * D, rng, 1.0f);
  if (gate) fill_normal(in.gate, n * H, rng, 2.0f);
  if (c.kind != LayerKind::csa) return in;

  const size_t Di = static_cast<size_t>(c.index_dim);
  const size_t per_row = G * static_cast<size_t>(c.index_heads) * Di;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  in.index_query.resize(n * per_row);
  std::vector<float> drift(per_row);
  for (size_t r = 0; r < requests.size(); ++r) {
    for (auto t = static_cast<size_t>(in.query_start_loc[r]);
         t < static_cast<size_t>(in.query_start_loc[r + 1]); ++t) {
      const bool first = t == static_cast<size_t>(in.query_start_loc[r]);
      for (size_t e = 0; e < per_row; ++e) {
        // Correlated rows drift as x' = 0.95 x + 0.3 noise (stationary
        // variance ~1), so neighbouring tokens prefer similar regions.
        drift[e] = correlated && !first ? 0.95f * drift[e] + 0.3f * normal(rng) : normal(rng);
        in.index_query[t * per_row + e] = float_to_bf16(drift[e]);
      }
    }
  }
  in.index_weight.resize(n * G * static_cast<size_t>(c.index_heads));
  for (auto& w : in.index_weight) w = uniform(rng);
  fill_normal(in.index_key, n * Di, rng, 1.0f);
  in.index_z.resize(n);
  for (auto& z : in.index_z) z = normal(rng);
  return in;
}

struct Scenario::State {
  LayerConfig config;
  ScenarioOptions options;
  std::mt19937_64 rng;
  std::vector<int32_t> prompt;  // prompt length of each request
  std::vector<int32_t> length;  // tokens each request finally holds
  int decode_left = 0;
  int64_t bound = 0;

  int32_t tokens_per_decode() const { return config.spec_tokens + 1; }
  bool prefilling() const {
    for (size_t r = 0; r < prompt.size(); ++r) {
      if (length[r] < prompt[r]) return true;
    }
    return false;
  }
};

Scenario::Scenario(const LayerConfig& config, const ScenarioOptions& options)
    : state_(std::make_unique<State>()) {
  validate_config(config);
  State& s = *state_;
  const int per_decode = config.spec_tokens + 1;
  require(options.requests >= 1 && options.min_prompt >= 0 &&
              options.max_prompt >= options.min_prompt && options.decode_steps >= 0 &&
              options.chunk > options.requests * per_decode,
          ErrorCode::invalid_argument,
          "scenario: expected requests >= 1, 0 <= min_prompt <= max_prompt, decode_steps >= 0 "
          "and chunk > requests * (spec_tokens + 1) = ",
          options.requests * per_decode, ", got chunk ", options.chunk);
  s.config = config;
  s.options = options;
  s.rng.seed(options.seed);
  std::uniform_int_distribution<int32_t> prompt(options.min_prompt, options.max_prompt);
  int64_t total = 0;
  int32_t longest = 0;
  for (int r = 0; r < options.requests; ++r) {
    s.prompt.push_back(prompt(s.rng));
    total += s.prompt.back();
    longest = std::max(longest, s.prompt.back());
  }
  s.length.assign(s.prompt.size(), 0);
  s.decode_left = options.decode_steps;
  // Every prefill step gives at least chunk - requests * (k + 1) tokens to
  // prompts, and a request grows by at most k + 1 per step once prefilled.
  const int64_t prefill_budget = options.chunk - int64_t{options.requests} * per_decode;
  const int64_t prefill_steps = (total + prefill_budget - 1) / prefill_budget;
  s.bound = longest + (prefill_steps + options.decode_steps) * per_decode;
}

Scenario::~Scenario() = default;

bool Scenario::done() const {
  return !state_->prefilling() && state_->decode_left == 0;
}

int64_t Scenario::max_context() const {
  return state_->bound;
}

ScenarioStep Scenario::next() {
  State& s = *state_;
  require(!done(), ErrorCode::invalid_argument, "scenario: next() called after the last step");
  const bool prefill = s.prefilling();
  const int32_t k = s.config.spec_tokens;
  std::vector<int32_t> requests, start, count;
  std::vector<char> verifying;
  int32_t budget = s.options.chunk;
  bool decode_rows = false, prefill_rows = false;
  // Decode / verify rows first, as a chunked-prefill scheduler does, then
  // the remaining budget to the prompts in order.
  for (size_t r = 0; r < s.prompt.size(); ++r) {
    if (s.length[r] < s.prompt[r]) continue;
    requests.push_back(static_cast<int32_t>(r));
    start.push_back(s.length[r]);
    count.push_back(s.tokens_per_decode());
    verifying.push_back(1);
    budget -= s.tokens_per_decode();
    decode_rows = true;
  }
  for (size_t r = 0; r < s.prompt.size() && budget > 0; ++r) {
    const int32_t left = s.prompt[r] - s.length[r];
    if (left <= 0) continue;
    const int32_t take = std::min(left, budget);
    requests.push_back(static_cast<int32_t>(r));
    start.push_back(s.length[r]);
    count.push_back(take);
    verifying.push_back(0);
    budget -= take;
    prefill_rows = true;
  }
  ScenarioStep step;
  step.input = random_step(s.config, s.rng, requests, start, count, s.options.gate, true);
  if (prefill_rows) {
    step.label = decode_rows ? "mixed" : "prefill";
  } else {
    step.label = k > 0 ? "verify" : "decode";
  }
  // Verify steps accept 0..k drafts: the next step starts right after the
  // bonus token and rewrites the rejected positions.
  std::uniform_int_distribution<int32_t> accepted(0, k);
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto r = static_cast<size_t>(requests[i]);
    s.length[r] = start[i] + (verifying[i] ? 1 + accepted(s.rng) : count[i]);
  }
  if (!prefill) --s.decode_left;
  return step;
}

}  // namespace step5::sim
