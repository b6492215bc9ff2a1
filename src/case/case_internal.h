// Helpers shared by the case loader, writer and outputs (SPEC 10).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "step5/config.h"
#include "step5/testing/case_file.h"
#include "step5/testing/case_safetensors.h"
#include "step5/testing/safetensors.h"

namespace step5::case_detail {

// "step{s}.{field}".
std::string step_name(size_t step, const char* field);

// Strict metadata values: the whole string must be the number, in JSON
// number syntax (integers: -?(0|[1-9][0-9]*)).
int32_t meta_int(const safetensors::File& file, const std::string& key);
float meta_float(const safetensors::File& file, const std::string& key);
// Shortest decimal that reads back as exactly `x`.
std::string format_float(float x);

// Config <-> SPEC 10 metadata keys (format, layer and the layer's fields).
void write_config(const LayerConfig& config, std::map<std::string, std::string>& metadata);
LayerConfig read_config(const safetensors::File& file);

// Throws io_error when the file holds a tensor not in `expected`, so a
// misspelled optional name is reported instead of silently ignored.
void reject_unexpected(const safetensors::File& file, const std::vector<std::string>& expected);

// Throws io_error naming a metadata key that a `kind` case (or outputs)
// file does not have, so a misspelled key is reported, not ignored.
void reject_unknown_meta(const safetensors::File& file, LayerKind kind, bool outputs);

// case_file / case_from and outputs_file / outputs_from (save_case and
// load_case without the file system): step5/testing/case_safetensors.h.

// Reads the file's `steps` metadata, checked to be >= 0 and at most the
// file's tensor count / `tensors_per_step` (each step has that many at
// least), so a huge count fails before anything is sized by it.
size_t meta_steps(const safetensors::File& file, size_t tensors_per_step);

}  // namespace step5::case_detail
