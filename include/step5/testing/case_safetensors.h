// Cases and replay outputs as safetensors files in memory (SPEC 10): what
// save_case / load_case and save_case_outputs / load_case_outputs
// (case_file.h) do, without the file system. For round-trip tests and the
// case fuzzer; src/case/case_file.cpp and case_outputs.cpp implement them.
#pragma once

#include <string>

#include "step5/testing/case_file.h"
#include "step5/testing/safetensors.h"

namespace step5::case_detail {

// A case as a safetensors file (validated first; `what` names it) and back.
safetensors::File case_file(const Case& c, const std::string& what);
Case case_from(const safetensors::File& file);
// The same for a replay's outputs.
safetensors::File outputs_file(const Case& c, const CaseOutputs& outputs, const std::string& what);
CaseOutputs outputs_from(const safetensors::File& file, const Case& c);

}  // namespace step5::case_detail
