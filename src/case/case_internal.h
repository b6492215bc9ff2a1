// Helpers shared by the case loader, writer and outputs (SPEC 10).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "case/safetensors.h"
#include "step5/config.h"

namespace step5::case_detail {

// "step{s}.{field}".
std::string step_name(size_t step, const char* field);

// Strict metadata values: the whole string must be the number.
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

// Reads the file's `steps` metadata, checked to be >= 0.
size_t meta_steps(const safetensors::File& file);

}  // namespace step5::case_detail
