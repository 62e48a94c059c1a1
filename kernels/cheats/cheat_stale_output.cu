// cheat: stale output.
// Hack class: stale output memory (Sakana's "AI CUDA Engineer" claimed 150x with a kernel that
// did not compute everything; its output buffer still held the reference's result).
// What it does: returns success without launching anything, trusting the output memory.
// Caught by: the output is poisoned with NaN before every call, and the candidate runs before
// any reference result exists in device memory.
// Expected: rejected, "output was stale: none of the N output elements was written ...".
#include <cuda_runtime.h>

#include "contract.h"

extern "C" int socratic_attention_forward(const SocraticAttentionArgs*, cudaStream_t) {
  return cudaSuccess;
}

extern "C" unsigned long long socratic_attention_workspace(const SocraticAttentionArgs*) {
  return 0;
}
