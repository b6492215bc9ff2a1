// The dense oracle as the cpu run's reference, and the helpers both
// references share (soak_reference.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <sstream>

#include "step5/numerics.h"
#include "step5/testing/oracle.h"
#include "step5attn/soak_reference.h"

namespace step5::tool::soak {

RowOrigin row_origin(const ScheduledStep& step, int64_t t) {
  const auto& qsl = step.host.query_start_loc;
  const auto it = std::upper_bound(qsl.begin(), qsl.end(), static_cast<int32_t>(t));
  RowOrigin origin;
  origin.request = static_cast<size_t>(it - qsl.begin()) - 1;
  const int32_t rows = qsl[origin.request + 1] - qsl[origin.request];
  origin.position = step.host.seq_lens[origin.request] - rows + (t - qsl[origin.request]);
  return origin;
}

void OutputDiff::add(const uint16_t* got, const double* want, size_t count) {
  for (size_t e = 0; e < count; ++e) {
    const double g = bf16_to_float(got[e]);
    // A value that is not finite never passes, on either side.
    if (!std::isfinite(g) || !std::isfinite(want[e])) {
      finite_ = false;
      continue;
    }
    max_abs_ = std::max(max_abs_, std::fabs(g - want[e]));
    err2_ += (g - want[e]) * (g - want[e]);
    ref2_ += want[e] * want[e];
  }
}

void OutputDiff::finish(RowsCheck& check, const LayerConfig& config, int64_t rows) const {
  check.rel_l2 = rows == 0 ? 0.0 : std::sqrt(err2_ / std::max(ref2_, 1e-300));
  check.max_abs = max_abs_;
  const sim::Tolerance tol = sim::default_tolerance(config);
  if (!check.ok) return;
  std::ostringstream why;
  if (!finite_) {
    why << "an output element is not finite";
  } else if (!(check.rel_l2 <= tol.rel_l2)) {
    why << "rel L2 " << check.rel_l2 << " expected <= " << tol.rel_l2;
  } else if (!(check.max_abs <= tol.max_abs)) {
    why << "max abs " << check.max_abs << " expected <= " << tol.max_abs;
  } else {
    return;
  }
  check.ok = false;
  check.message = std::string(layer_kind_name(config.kind)) + " output: " + why.str();
}

namespace {

std::vector<float> widen(const uint16_t* bits, size_t count) {
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

// What a cache read of one stored element gives (bf16, or e4m3 times scale).
float read_stored(const LayerConfig& c, const uint8_t* at, bool is_value) {
  if (c.kv_dtype == DType::bf16) {
    uint16_t b;
    std::memcpy(&b, at, sizeof b);
    return bf16_to_float(b);
  }
  return fp8_e4m3_to_float(*at) * (is_value ? c.v_scale : c.k_scale);
}

float read_summary(const LayerConfig& c, const uint8_t* at) {
  if (c.summary_dtype == DType::bf16) {
    uint16_t b;
    std::memcpy(&b, at, sizeof b);
    return bf16_to_float(b);
  }
  return fp8_e4m3_to_float(*at);
}

class OracleReference final : public Reference {
 public:
  explicit OracleReference(const std::vector<LayerConfig>& layers) : layers_(layers) {}

  std::string name() const override { return "dense oracle"; }

  void record(const ScheduledStep& step) override {
    for (size_t l = 0; l < layers_.size(); ++l) {
      const LayerConfig& c = layers_[l];
      const sim::StepInput& in = step.inputs[l];
      const auto gd = static_cast<size_t>(c.num_kv_heads) * static_cast<size_t>(c.head_size);
      const auto di = static_cast<size_t>(c.index_dim);
      const bool csa = c.kind == LayerKind::csa;
      for (size_t m = 0; m < step.serial.size(); ++m) {
        oracle::History& h = history(step.serial[m], l);
        const int32_t begin = step.host.query_start_loc[m], end = step.host.query_start_loc[m + 1];
        const int32_t start = step.host.seq_lens[m] - (end - begin);
        h.truncate(c, start);
        for (int32_t t = begin; t < end; ++t) {
          const auto row = static_cast<size_t>(t);
          const std::vector<float> k = widen(in.key.data() + row * gd, gd);
          const std::vector<float> v = widen(in.value.data() + row * gd, gd);
          const std::vector<float> ik =
              csa ? widen(in.index_key.data() + row * di, di) : std::vector<float>();
          h.write(c, start + (t - begin), k.data(), v.data(), csa ? ik.data() : nullptr,
                  csa ? in.index_z[row] : 0.0f);
        }
      }
    }
  }

  void forget(int64_t serial) override { histories_.erase(serial); }

  RowsCheck check_rows(const ScheduledStep& step, size_t layer, const std::vector<int64_t>& rows,
                       const LayerResult& device) override {
    const LayerConfig& c = layers_[layer];
    const sim::StepInput& in = step.inputs[layer];
    const int H = c.num_heads, G = c.num_kv_heads, D = c.head_size, K = c.topk;
    const size_t hd = static_cast<size_t>(H) * static_cast<size_t>(D);
    const size_t gi = static_cast<size_t>(G) * static_cast<size_t>(c.index_heads);
    const auto di = static_cast<size_t>(c.index_dim);
    RowsCheck check;
    OutputDiff diff;
    for (const int64_t t : rows) {
      const auto row = static_cast<size_t>(t);
      const RowOrigin origin = row_origin(step, t);
      const oracle::History& h = history(step.serial[origin.request], layer);
      const std::vector<float> q = widen(in.query.data() + row * hd, hd);
      const std::vector<float> gate =
          widen(in.gate.data() + row * static_cast<size_t>(H), static_cast<size_t>(H));
      oracle::QueryRow query;
      query.position = origin.position;
      query.query = q.data();
      query.gate = gate.data();
      oracle::RowResult ref;
      if (c.kind == LayerKind::swa) {
        ref = oracle::swa_row(c, h, query);
      } else {
        const std::vector<float> iq = widen(in.index_query.data() + row * gi * di, gi * di);
        query.index_query = iq.data();
        query.index_weight = in.index_weight.data() + row * gi;
        ref = oracle::csa_row(c, h, query);
        std::vector<std::vector<int32_t>> got;
        bool differs = false;
        const std::string why = sim::check_row_selection(
            c, ref, device.selected.data() + row * static_cast<size_t>(G * K),
            sim::default_tolerance(c).score, got, differs);
        if (!why.empty()) {
          check.ok = false;
          check.message = "csa row " + std::to_string(t) + " (position " +
                          std::to_string(origin.position) + ") selection " + why;
          diff.finish(check, c, check.rows);
          return check;
        }
        if (differs) {
          ++check.selection_differs;
          ref = oracle::csa_row(c, h, query, &got);
        }
      }
      diff.add(device.output.data() + row * hd, ref.output.data(), hd);
      ++check.rows;
    }
    diff.finish(check, c, check.rows);
    return check;
  }

  CacheCompare compare(const Engine& device, const std::vector<Request>& live) override {
    CacheCompare result;
    std::vector<uint8_t> bytes;
    for (size_t l = 0; l < layers_.size(); ++l) {
      const LayerConfig& c = layers_[l];
      const LayerCache& view = device.cache(l);
      const int64_t B = c.block_size, D = c.head_size, G = c.num_kv_heads;
      const size_t elem = dtype_size(c.kv_dtype);
      for (const Request& r : live) {
        const oracle::History& h = history(r.serial, l);
        for (int64_t p = 0; p < r.length; ++p) {
          if (p % B == 0) device.read_block(l, r.blocks[static_cast<size_t>(p / B)], bytes);
          for (int64_t g = 0; g < G; ++g) {
            const uint8_t* at =
                bytes.data() + g * view.kv.head_stride + (p % B) * view.kv.token_stride;
            bool same = true;
            for (int64_t d = 0; d < 2 * D; ++d) {
              const bool is_value = d >= D;
              const float x =
                  (is_value ? h.value : h.key)[static_cast<size_t>((p * G + g) * D + d % D)];
              same = same &&
                     float_bits(read_stored(c, at + static_cast<size_t>(d) * elem, is_value)) ==
                         float_bits(oracle::stored_kv(c, x, is_value));
            }
            ++result.kv_rows;
            if (!same) note(result, result.kv_mismatches, c, r, "K/V at position", p);
          }
        }
        if (c.kind != LayerKind::csa) continue;
        const size_t selem = dtype_size(c.summary_dtype);
        for (int64_t j = 0; j < r.length / kRegionSize; ++j) {
          const int64_t per_block = B / kRegionSize;
          device.read_block(l, r.blocks[static_cast<size_t>(j / per_block)], bytes);
          const uint8_t* at = bytes.data() + kv_bytes_per_block(c) +
                              static_cast<size_t>((j % per_block) * view.summaries.region_stride);
          const std::vector<float> want = oracle::summary(c, h, j);
          bool same = true;
          for (size_t d = 0; d < want.size(); ++d) {
            const float got = read_summary(c, at + d * selem);
            same = same && std::isfinite(got) && float_bits(got) == float_bits(want[d]);
          }
          ++result.summaries;
          if (!same) note(result, result.summary_mismatches, c, r, "summary of region", j);
        }
      }
    }
    return result;
  }

 private:
  oracle::History& history(int64_t serial, size_t layer) {
    auto& per_layer = histories_[serial];
    per_layer.resize(layers_.size());
    return per_layer[layer];
  }

  static void note(CacheCompare& result, int64_t& counter, const LayerConfig& c, const Request& r,
                   const char* what, int64_t where) {
    if (counter++ == 0 && result.first_mismatch.empty()) {
      result.first_mismatch = std::string(layer_kind_name(c.kind)) + " request " +
                              std::to_string(r.serial) + (r.is_long ? " (long)" : "") + ": " +
                              what + " " + std::to_string(where) + " differs from the oracle";
    }
  }

  std::vector<LayerConfig> layers_;
  std::map<int64_t, std::vector<oracle::History>> histories_;  // serial -> [layers]
};

}  // namespace

std::unique_ptr<Reference> make_oracle_reference(const std::vector<LayerConfig>& layers) {
  return std::make_unique<OracleReference>(layers);
}

}  // namespace step5::tool::soak
