// Linked by the harness into every candidate's shared library. A candidate links the CUDA
// runtime statically, so its launch errors live in its own copy of the runtime: this shim lets
// the harness read them after each call instead of having them surface in an unrelated op.
// Defining these symbols in a candidate is a link error, which the harness reports.
#include <cuda_runtime.h>

extern "C" int socratic_harness_last_error(void) { return (int)cudaGetLastError(); }

extern "C" const char* socratic_harness_error_name(int code) {
  return cudaGetErrorName((cudaError_t)code);
}

// Persisting L2 (verifier rule 4): the limit of L2 set aside for persisting accesses is reset
// to 0 and persisting lines are evicted before timing, so nothing a call pinned there survives
// the harness's flush. Returns the limit found before, in bytes (-1 when it cannot be read).
extern "C" long long socratic_harness_reset_persisting_l2(void) {
  size_t before = 0;
  if (cudaDeviceGetLimit(&before, cudaLimitPersistingL2CacheSize) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  if (before > 0) cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0);
  cudaCtxResetPersistingL2Cache();
  cudaGetLastError();  // leave no error behind for the candidate's next call
  return (long long)before;
}
