// cheat: banned library.
// Hack class: fallback to a vendor library (the contract allows CUDA toolkit headers only: no
// cuBLAS, cuDNN, CUTLASS, CuTe, Thrust or CUB).
// What it does: computes S = Q K^T with cublasGemmStridedBatchedEx and leaves the rest to
// hand-written code.
// Caught by: the static checks, before compiling, with line numbers.
// Expected: rejected, "not run: static checks refused the kernel: line N: includes
// cublas_v2.h: cuBLAS is not allowed".
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "contract.h"

extern "C" int socratic_attention_forward(const SocraticAttentionArgs* a, cudaStream_t stream) {
  static cublasHandle_t handle = nullptr;
  if (handle == nullptr && cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) return cudaErrorUnknown;
  cublasSetStream(handle, stream);
  const float one = 1.f, zero = 0.f;
  // S[h] = K[h] Q[h]^T for every head of batch 0 (column-major view of row-major data).
  cublasGemmStridedBatchedEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, a->seqlen_k, a->seqlen_q,
                             a->head_dim, &one, a->k, CUDA_R_16BF, (int)a->k_row_stride,
                             a->k_head_stride, a->q, CUDA_R_16BF, (int)a->q_row_stride,
                             a->q_head_stride, &zero, a->workspace, CUDA_R_32F, a->seqlen_k,
                             (long long)a->seqlen_q * a->seqlen_k, a->heads_q, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT);
  return cudaSuccess;  // (softmax and P V would follow)
}

extern "C" unsigned long long socratic_attention_workspace(const SocraticAttentionArgs*) {
  return 0;
}
