// step5_attention._testing_ext: the library's dense oracle for tests and
// checks from Python (links step5_testing). Inputs are float32 numpy arrays
// of the exact values the engine wrote (bf16 widened); one call covers the
// rows of one request, whose whole history (after the step) is given.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "errors.h"
#include "step5/testing/oracle.h"
#include "testing_timing.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace step5::python {
namespace {

// Near-tie slack of a backend's selection, relative to the largest score
// (sim::Tolerance::score).
constexpr double kScoreTolerance = 1e-4;

template <class T>
using HostIn = nb::ndarray<const T, nb::c_contig, nb::device::cpu>;
using Floats = HostIn<float>;

template <class T>
nb::ndarray<nb::numpy, T> to_numpy(std::vector<T> values, std::initializer_list<size_t> shape) {
  auto* owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(owned->data(), shape, owner);
}

void expect_shape(const char* what, size_t got_rank, const size_t* got,
                  std::initializer_list<size_t> want) {
  bool ok = got_rank == want.size();
  size_t i = 0;
  for (size_t w : want) ok = ok && got[i++] == w;
  if (!ok) {
    std::string text = std::string(what) + ": expected shape [";
    i = 0;
    for (size_t w : want) text += (i++ ? ", " : "") + std::to_string(w);
    text += "], got [";
    for (size_t k = 0; k < got_rank; ++k) text += (k ? ", " : "") + std::to_string(got[k]);
    fail_argument(text + "]");
  }
}

template <class A>
void expect(const char* what, const A& a, std::initializer_list<size_t> want) {
  std::vector<size_t> shape(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) shape[i] = a.shape(i);
  expect_shape(what, shape.size(), shape.data(), want);
}

// One request's tokens at positions 0..length-1; key and value may be null
// (summaries only need the index rows).
oracle::History make_history(const LayerConfig& c, size_t length, const float* key,
                             const float* value, const float* index_key, const float* index_z) {
  const auto G = static_cast<size_t>(c.num_kv_heads), D = static_cast<size_t>(c.head_size);
  const auto Di = static_cast<size_t>(c.index_dim);
  const bool csa = c.kind == LayerKind::csa;
  const std::vector<float> zeros(key ? 0 : G * D, 0.0f);
  oracle::History h;
  for (size_t p = 0; p < length; ++p) {
    h.write(c, static_cast<int64_t>(p), key ? key + p * G * D : zeros.data(),
            value ? value + p * G * D : zeros.data(), csa ? index_key + p * Di : nullptr,
            csa ? index_z[p] : 0.0f);
  }
  return h;
}

oracle::History checked_history(const LayerConfig& c, const Floats& key, const Floats& value,
                                const std::optional<Floats>& index_key,
                                const std::optional<Floats>& index_z) {
  const size_t length = key.ndim() > 0 ? key.shape(0) : 0;
  const auto G = static_cast<size_t>(c.num_kv_heads), D = static_cast<size_t>(c.head_size);
  expect("key", key, {length, G, D});
  expect("value", value, {length, G, D});
  const bool csa = c.kind == LayerKind::csa;
  if (csa) {
    if (!index_key || !index_z) fail_argument("index_key, index_z: expected arrays for CSA");
    expect("index_key", *index_key, {length, static_cast<size_t>(c.index_dim)});
    expect("index_z", *index_z, {length});
  }
  return make_history(c, length, key.data(), value.data(), csa ? index_key->data() : nullptr,
                      csa ? index_z->data() : nullptr);
}

// The oracle's output (fp64, before bf16 rounding) of every row, and for
// CSA each row's selection [n, G, K] ascending, -1 padded.
nb::dict attention(const LayerConfig& c, const Floats& key, const Floats& value,
                   const HostIn<int64_t>& positions, const Floats& query,
                   const std::optional<Floats>& gate, const std::optional<Floats>& index_key,
                   const std::optional<Floats>& index_z, const std::optional<Floats>& index_query,
                   const std::optional<Floats>& index_weight,
                   const std::optional<HostIn<int32_t>>& forced_selection, bool dense) {
  validate_config(c);
  const oracle::History h = checked_history(c, key, value, index_key, index_z);
  const size_t n = positions.ndim() == 1 ? positions.shape(0) : 0;
  const auto H = static_cast<size_t>(c.num_heads), D = static_cast<size_t>(c.head_size);
  const auto G = static_cast<size_t>(c.num_kv_heads), I = static_cast<size_t>(c.index_heads);
  const auto Di = static_cast<size_t>(c.index_dim), K = static_cast<size_t>(c.topk);
  expect("positions", positions, {n});
  expect("query", query, {n, H, D});
  if (gate) expect("gate", *gate, {n, H});
  const bool csa = c.kind == LayerKind::csa && !dense;
  if (csa) {
    if (!index_query || !index_weight) {
      fail_argument("index_query, index_weight: expected arrays for a CSA layer");
    }
    expect("index_query", *index_query, {n, G, I, Di});
    expect("index_weight", *index_weight, {n, G, I});
    if (forced_selection) expect("forced_selection", *forced_selection, {n, G, K});
  }
  std::vector<double> output(n * H * D);
  std::vector<int32_t> selected(csa ? n * G * K : 0, -1);
  std::vector<uint8_t> acceptable(csa && forced_selection ? n * G : 0, 0);
  for (size_t t = 0; t < n; ++t) {
    oracle::QueryRow row;
    row.position = positions.data()[t];
    if (row.position < 0 || row.position >= h.length) {
      fail_argument("positions[" + std::to_string(t) + "]: expected 0.." +
                    std::to_string(h.length - 1) + " (inside the history), got " +
                    std::to_string(row.position));
    }
    row.query = query.data() + t * H * D;
    row.gate = gate ? gate->data() + t * H : nullptr;
    if (csa) {
      row.index_query = index_query->data() + t * G * I * Di;
      row.index_weight = index_weight->data() + t * G * I;
    }
    // A forced selection (a backend's, -1 entries dropped) replaces the
    // oracle's own, so attention can be checked where near-ties differ.
    std::vector<std::vector<int32_t>> forced(G);
    for (size_t g = 0; csa && forced_selection && g < G; ++g) {
      const int32_t* sel = forced_selection->data() + (t * G + g) * K;
      for (size_t k = 0; k < K; ++k) {
        if (sel[k] >= 0) forced[g].push_back(sel[k]);
      }
    }
    const oracle::RowResult r =
        dense  ? oracle::dense_causal_row(c, h, row)
        : !csa ? oracle::swa_row(c, h, row)
               : oracle::csa_row(c, h, row, forced_selection ? &forced : nullptr);
    for (size_t g = 0; !acceptable.empty() && g < G; ++g) {
      acceptable[t * G + g] =
          oracle::selection_acceptable(r.scores[g], forced[g], c.topk, kScoreTolerance) ? 1 : 0;
    }
    std::copy(r.output.begin(), r.output.end(), output.begin() + static_cast<long>(t * H * D));
    for (size_t g = 0; csa && g < G; ++g) {
      const std::vector<int32_t>& sel = r.selected[g];
      std::copy(sel.begin(), sel.end(), selected.begin() + static_cast<long>((t * G + g) * K));
    }
  }
  nb::dict result;
  result["output"] = to_numpy(std::move(output), {n, H, D});
  if (csa) result["selected"] = to_numpy(std::move(selected), {n, G, K});
  if (!acceptable.empty()) result["selection_acceptable"] = to_numpy(std::move(acceptable), {n, G});
  return result;
}

// Stored (dequantized) summaries of every closed region of one request's
// index rows: [length / 8, Di].
nb::ndarray<nb::numpy, float> summaries(const LayerConfig& c, const Floats& index_key,
                                        const Floats& index_z) {
  validate_config(c);
  if (c.kind != LayerKind::csa) fail_argument("config.kind: expected csa for summaries, got swa");
  const size_t length = index_key.ndim() > 0 ? index_key.shape(0) : 0;
  expect("index_key", index_key, {length, static_cast<size_t>(c.index_dim)});
  expect("index_z", index_z, {length});
  const oracle::History h =
      make_history(c, length, nullptr, nullptr, index_key.data(), index_z.data());
  const size_t regions = length / kRegionSize;
  const auto Di = static_cast<size_t>(c.index_dim);
  std::vector<float> out;
  out.reserve(regions * Di);
  for (size_t j = 0; j < regions; ++j) {
    const std::vector<float> s = oracle::summary(c, h, static_cast<int64_t>(j));
    out.insert(out.end(), s.begin(), s.end());
  }
  return to_numpy(std::move(out), {regions, Di});
}

}  // namespace
}  // namespace step5::python

NB_MODULE(_testing_ext, m) {
  namespace py = step5::python;
  m.doc() = "The step5 dense oracle, for tests (links step5_testing)";
  // LayerConfig comes from step5_attention._ext, imported first by the package.
  py::register_error_translator();
  m.def("oracle_attention", &py::attention, "config"_a, "key"_a, "value"_a, "positions"_a,
        "query"_a, "gate"_a.none() = nb::none(), "index_key"_a.none() = nb::none(),
        "index_z"_a.none() = nb::none(), "index_query"_a.none() = nb::none(),
        "index_weight"_a.none() = nb::none(), "forced_selection"_a.none() = nb::none(),
        "dense"_a = false);
  m.def("oracle_summaries", &py::summaries, "config"_a, "index_key"_a, "index_z"_a);
  m.def("cpp_decode_forward_seconds", &py::cpp_decode_forward_seconds, "config"_a, "context"_a,
        "iterations"_a, "num_threads"_a = 1, "empty"_a = false,
        nb::call_guard<nb::gil_scoped_release>());
}
