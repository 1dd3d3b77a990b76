"""Checkpoint formats and readers, free of TVM: HF directories (config.json, safetensors,
generation_config.json) and GGUF files (metadata, tensors, quantized blocks), and the model
families (families/: how each family's checkpoints are spelled).

Why a package of its own: both the compiler (which reads a checkpoint's config and weight
layout to build an artifact) and the runtime (which reads the weights into the artifact's
parameters) need them, and neither may import the other.
"""
