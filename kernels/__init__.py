"""CUDA sources of Socratic; Python lives only in kernels.attention.family."""
