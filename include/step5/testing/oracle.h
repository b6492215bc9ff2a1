// An independent dense formulation of SPEC sections 3-5, shipped with the
// library so engines, tools and tests can check any backend.
//
// It knows nothing of pages, rings or plans: it reads each request's tokens
// by position from a History, builds every row's key set explicitly, scores
// regions by brute force in fp64, selects with a stable sort, and runs dense
// masked attention in fp64. Only storage rounding (bf16 / fp8 e4m3 of the
// cache and of summaries, and the fp32 summary formula the SPEC fixes) is
// reproduced exactly, because it defines the values a backend reads.
#pragma once

#include <cstdint>
#include <vector>

#include "step5/config.h"

namespace step5::oracle {

// Every token of one request, by position, as the engine finally wrote it.
// Values are the exact bf16 inputs widened to float.
struct History {
  int64_t length = 0;
  std::vector<float> key;        // [length, G, D]
  std::vector<float> value;      // [length, G, D]
  std::vector<float> index_key;  // [length, Di] (CSA)
  std::vector<float> index_z;    // [length] (CSA)

  // Writes (or rewrites) one token at `position`, growing the history.
  // key/value point at G*D floats, index_key at Di floats (may be null for
  // SWA), z is ignored for SWA.
  void write(const LayerConfig& config, int64_t position, const float* key_row,
             const float* value_row, const float* index_key_row, float z);
  // Drops positions >= length (rejected drafts).
  void truncate(const LayerConfig& config, int64_t new_length);
};

// One query row.
struct QueryRow {
  int64_t position = 0;
  const float* query = nullptr;         // [H, D]
  const float* gate = nullptr;          // [H] or null
  const float* index_query = nullptr;   // [G, I, Di] (CSA)
  const float* index_weight = nullptr;  // [G, I] (CSA)
};

struct RowResult {
  std::vector<double> output;                  // [H, D], before output rounding
  std::vector<std::vector<int32_t>> selected;  // [G][<=K] ascending
  std::vector<std::vector<double>> scores;     // [G][C]: every closed region
};

// The stored (dequantized) summary of closed region `region`: the fp32
// formula of SPEC 3 rounded once to config.summary_dtype.
std::vector<float> summary(const LayerConfig& config, const History& history, int64_t region);

// Value a cache read returns for one K or V element (bf16, or fp8 e4m3 of
// x / scale times scale).
float stored_kv(const LayerConfig& config, float x, bool is_value);

// CSA row: selection by score (ties to the lower region) unless `forced`
// gives each group's selection, then attention over selected regions plus
// the current region up to the row itself.
RowResult csa_row(const LayerConfig& config, const History& history, const QueryRow& row,
                  const std::vector<std::vector<int32_t>>* forced = nullptr);

// SWA row: attention over positions max(0, p - W + 1) .. p.
RowResult swa_row(const LayerConfig& config, const History& history, const QueryRow& row);

// Dense causal attention over positions 0..p, no selection: the property
// "CSA with C <= K equals dense causal attention" is checked against it.
RowResult dense_causal_row(const LayerConfig& config, const History& history, const QueryRow& row);

// A backend's selection for one (row, group) is acceptable when it has
// min(C, K) distinct closed regions and every selected score is >= every
// unselected score up to `tolerance` (relative to the largest |score|).
bool selection_acceptable(const std::vector<double>& scores, const std::vector<int32_t>& selected,
                          int topk, double tolerance);

}  // namespace step5::oracle
