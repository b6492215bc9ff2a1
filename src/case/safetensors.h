// The safetensors reader and writer are public to the testing library's
// users (tests, fuzzers): step5/testing/safetensors.h.
#pragma once

#include "step5/testing/safetensors.h"
