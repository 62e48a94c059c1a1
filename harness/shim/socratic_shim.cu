// Linked by the harness into every candidate's shared library. A candidate links the CUDA
// runtime statically, so its launch errors live in its own copy of the runtime: this shim lets
// the harness read them after each call instead of having them surface in an unrelated op.
// Defining these symbols in a candidate is a link error, which the harness reports.
#include <cuda_runtime.h>

extern "C" int socratic_harness_last_error(void) { return (int)cudaGetLastError(); }

extern "C" const char* socratic_harness_error_name(int code) {
  return cudaGetErrorName((cudaError_t)code);
}
