#include "errors.h"

#include <nanobind/nanobind.h>

#include <exception>

namespace step5::python {

namespace nb = nanobind;

namespace {

PyObject* exception_type(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return PyExc_ValueError;
    case ErrorCode::out_of_range: return PyExc_IndexError;
    case ErrorCode::unsupported: return PyExc_NotImplementedError;
    case ErrorCode::device_error:
    case ErrorCode::io_error: return PyExc_RuntimeError;
  }
  return PyExc_RuntimeError;
}

}  // namespace

void register_error_translator() {
  nb::register_exception_translator([](const std::exception_ptr& error, void*) {
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      PyErr_SetString(exception_type(e.code()), e.what());
    }
  });
}

}  // namespace step5::python
