// kernels/attention/contract.h (ABI version 1)
// The contract every Socratic attention-forward candidate implements.
// The ABI only grows; any change bumps SOCRATIC_ATTENTION_ABI and keeps old kernels loadable.
#pragma once
#include <cuda_runtime.h>

typedef struct {
  const void* q;   // bf16 [batch, seqlen_q,  heads_q,  head_dim]
  const void* k;   // bf16 [batch, seqlen_k,  heads_kv, head_dim]
  const void* v;   // bf16 [batch, seqlen_k,  heads_kv, head_dim]
  void* o;         // bf16 [batch, seqlen_q,  heads_q,  head_dim]
  long long q_batch_stride, q_row_stride, q_head_stride;   // in elements;
  long long k_batch_stride, k_row_stride, k_head_stride;   // head_dim is
  long long v_batch_stride, v_row_stride, v_head_stride;   // contiguous
  long long o_batch_stride, o_row_stride, o_head_stride;
  int batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  int causal;            // 1: query i sees keys j <= i + (seqlen_k - seqlen_q)
  float softmax_scale;   // usually head_dim^-0.5
  void* workspace;       // scratch owned by the harness, poisoned before calls
  unsigned long long workspace_bytes;
} SocraticAttentionArgs;

#define SOCRATIC_ATTENTION_ABI 1
// returns a cudaError_t; launches only on `stream`; never synchronizes the device
extern "C" int socratic_attention_forward(const SocraticAttentionArgs* args,
                                          cudaStream_t stream);
// optional: scratch the kernel needs for these args (split-KV, etc.)
extern "C" unsigned long long socratic_attention_workspace(const SocraticAttentionArgs* args);
