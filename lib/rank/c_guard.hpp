// The C API's error handling (prism.h): what the C++ side throws becomes a
// negative prism_errc and the calling thread's message (prism_last_error(),
// as errno is per thread). Shared by the communicator's and the group's C
// functions.
#pragma once

#include <new>
#include <string>

#include "prism/prism.h"
#include "prism/prism.hpp"

namespace prism::capi {

int fail(prism_errc code, const std::string& msg);
const char* last_error_text();
prism_errc code_of(Errc e);
Tuning tuning(const prism_tuning* t);
OpOptions options(const prism_op_options* o);

// Runs f, turning what it throws into a code and the thread's last error.
template <class F>
int guarded(F&& f) {
  try {
    f();
    return PRISM_OK;
  } catch (const Error& e) {
    return fail(code_of(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return fail(PRISM_EINTERNAL, "out of memory");
  } catch (const std::exception& e) {
    return fail(PRISM_EINTERNAL, e.what());
  }
}

}  // namespace prism::capi
