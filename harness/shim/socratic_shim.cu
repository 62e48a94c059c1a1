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

// Tensor maps (docs/decisions.md, "Tensor maps ..."): the one driver function a kernel may
// call. The kernel's library is not linked with libcuda (-z defs makes any other driver name a
// link error), so this definition is the one its call binds to; it fetches the driver's
// function once, by version, and forwards. Encoding is host-only: it reads the arguments and
// writes the 128-byte map, touching no device state.
#include <cuda.h>

typedef CUresult (*SocraticEncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                        const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                        const cuuint32_t*, CUtensorMapInterleave,
                                        CUtensorMapSwizzle, CUtensorMapL2promotion,
                                        CUtensorMapFloatOOBfill);

extern "C" CUresult CUDAAPI cuTensorMapEncodeTiled(
    CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
    void* globalAddress, const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
    const cuuint32_t* boxDim, const cuuint32_t* elementStrides, CUtensorMapInterleave interleave,
    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
    CUtensorMapFloatOOBfill oobFill) {
  static SocraticEncodeTiled encode = nullptr;
  if (encode == nullptr) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess || fn == nullptr) {
      cudaGetLastError();
      return CUDA_ERROR_NOT_FOUND;
    }
    encode = reinterpret_cast<SocraticEncodeTiled>(fn);
  }
  return encode(tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
                boxDim, elementStrides, interleave, swizzle, l2Promotion, oobFill);
}
