// The JSON reader and writers are public to the testing library's users
// (tests, fuzzers, the CLI): step5/testing/json.h.
#pragma once

#include "step5/testing/json.h"
