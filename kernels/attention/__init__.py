"""Attention forward kernels (ABI v1 contract, baseline, family, gallery)."""
