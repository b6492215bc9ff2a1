// Phase one of `step5attn bench`: the cuda backend's attention against the
// cpu backend on identical inputs, before any timing is trusted.
#pragma once

#include <iosfwd>
#include <string>

#include "step5/attention.h"

namespace step5::tool::bench {

// Runs sparse_attention / window_attention of both backends on a few
// shapes (split and unsplit launches, bf16 and fp8, H/G 1, 8 and 16) and
// prints one line each. Appends one JSON object per shape to `json` (comma
// separated). Returns whether every shape passed.
bool run_attention_checks(Backend& cpu, Backend& gpu, std::ostream& out, std::string& json);

}  // namespace step5::tool::bench
