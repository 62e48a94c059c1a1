"""Attention forward, the first problem: suite, references, FLOP and byte model, peers."""
