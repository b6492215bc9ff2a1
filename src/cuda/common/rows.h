// Row metadata as the kernels see it (SPEC 7). A row's request and position
// come from one of three sources, chosen on the host once per launch:
//   - uniform steps (decode, verify): derived from seq_lens and the query
//     length, so a captured CUDA graph replays with new seq_lens; rows past
//     query_start_loc[R] are padding (requests of length 0);
//   - mixed steps in a forward: the plan's tables, copied into the workspace
//     by prepare_step (only the requests when the plan read upper bounds of
//     seq_lens: positions then come from the device lengths);
//   - single operations on mixed steps (no workspace): a binary search of
//     query_start_loc, which is on the device anyway.
#pragma once

#include <cstdint>

namespace step5::cuda {

struct RowMeta {
  const int32_t* row_request = nullptr;      // [n] device; null unless table mode
  const int32_t* row_position = nullptr;     // [n] device; null: from seq_lens
  const int32_t* query_start_loc = nullptr;  // [R+1] device; never null when n > 0
  const int32_t* seq_lens = nullptr;         // [R] device; never null when n > 0
  int32_t num_requests = 0;                  // R
  int32_t query_len = 0;                     // uniform steps: tokens per request; else 0
};

#if defined(__CUDACC__)
// Request and position of step row `t`; false for a padding row, whose
// position is set to 0 (no closed regions) and must not be attended.
__device__ __forceinline__ bool row_of(const RowMeta& m, int64_t t, int32_t& request,
                                       int32_t& position) {
  if (m.query_len > 0) {
    request = static_cast<int32_t>(t / m.query_len);
    // Requests after the live ones have no rows (CUDA-graph padding by
    // whole requests): a row is live while it is inside query_start_loc[R].
    if (t >= __ldg(m.query_start_loc + m.num_requests)) {
      position = 0;
      return false;
    }
    position = __ldg(m.seq_lens + request) - m.query_len + static_cast<int32_t>(t % m.query_len);
    return true;
  }
  if (m.row_request != nullptr) {
    request = __ldg(m.row_request + t);
    if (m.row_position != nullptr) {
      position = __ldg(m.row_position + t);
      return true;
    }
    // Planned from upper bounds: the position comes from the exact length.
    const int32_t begin = __ldg(m.query_start_loc + request);
    const int32_t qlen = __ldg(m.query_start_loc + request + 1) - begin;
    position = __ldg(m.seq_lens + request) - qlen + static_cast<int32_t>(t - begin);
    return true;
  }
  // Last r with query_start_loc[r] <= t; empty requests share a start, so
  // taking the last one lands on the request that owns t.
  int32_t lo = 0, hi = m.num_requests - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if (__ldg(m.query_start_loc + mid) <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  request = lo;
  const int32_t begin = __ldg(m.query_start_loc + lo);
  const int32_t qlen = __ldg(m.query_start_loc + lo + 1) - begin;
  position = __ldg(m.seq_lens + lo) - qlen + static_cast<int32_t>(t - begin);
  return true;
}
#endif

}  // namespace step5::cuda
