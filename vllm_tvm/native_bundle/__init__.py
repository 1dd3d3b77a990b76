"""Embedding a compiled model in a C program: building libvllm_tvm and writing bundles.

`vllm-tvm embed` puts an artifact, its weights and tokenizer, the C library (native/, built
here against the TVM wheel's runtime) and a C command-line tool into one folder that runs with
no Python (see include/vllm_tvm.h).
"""
