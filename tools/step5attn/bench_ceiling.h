// The device-copy ceiling of the GPU the bench runs on, measured at its
// start. The issues' goals count a step's time against the copy bandwidth
// measured in the same session, while bench_result.h's kPeakBytes is the
// H200's, so on any other GPU (an H100 has ~30 % less) the constant alone
// misstates how close a kernel is to its floor.
#pragma once

#include <cstddef>

#include "step5attn/bench_result.h"

namespace step5::tool::bench {

// Median of timed device-to-device copies of min(256 MiB, free / 4) bytes
// (far past the L2, so the copies stream from and to device memory), each
// counted as its bytes read plus written. Not measured (NaN) when less than
// 64 MiB could be spared or the timing reads zero. Throws step5::Error on a
// CUDA failure.
MeasuredCopy measure_copy_ceiling(size_t free_bytes);

}  // namespace step5::tool::bench
