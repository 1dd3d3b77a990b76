"""The entry layer above the compiler and the runtime: `LLM` and artifact resolution
(compile on first use). Only this layer and the CLI may bring the two together.
"""
