"""Bidirectional attention among one image's soft tokens during prefill (Gemma 3), over
TVM's causal paged attention.

Why this shape: TVM 0.27's paged KV cache computes causal attention only (its one mask is
a token tree's ancestors, which cannot say "these tokens see each other"). transformers'
Gemma 3 lets an image's soft tokens attend to all of their image both ways (sliding layers:
AND(window, OR(causal, same image))). Every other query is plain causal. So a prefill that
carries images runs the cache's attention as always (which also appends the chunk's keys
and values), and for the soft-token rows replaces its output by a dense attention over the
chunk's own keys under an additive mask the runtime builds (same sequence, and causal or
same image). That is exact when every key such a row may see is in the chunk: the runtime
prefills a prompt with images from its first token through the end of its last image in
one chunk (never split, never after cached tokens), and the chunk is no longer than the
sliding window (the runtime spec's chunk limit), so the window never cuts it.
"""

from __future__ import annotations

from tvm.relax.frontend.nn import Tensor, op


class ImageBlockAttention:
    """The soft-token rows' attention of the prefill being traced (not a module: it holds
    the traced function's mask inputs while `prefill_images` is exported, nothing after)."""

    def __init__(self) -> None:
        self.attention_bias: Tensor | None = None
        """[tokens, tokens] fp32: 0 where row i may see key j, a large negative elsewhere."""
        self.image_rows: Tensor | None = None
        """[tokens] of the model's dtype: 1 at the soft-token rows whose output is
        replaced, 0 elsewhere (a product, not a bool select: CUDA's codegen of a vectorised
        bool `where` does not compile; x * 1 + y * 0 is x exactly)."""

    def __call__(
        self, qkv: Tensor, causal: Tensor, q_heads: int, kv_heads: int, sm_scale: float
    ) -> Tensor:
        """`causal` [1, tokens, q_heads, d] with the image rows replaced; `qkv` [1, tokens,
        q + 2 kv heads, d] is what the cache's attention read (normed, rotated)."""
        if self.attention_bias is None or self.image_rows is None:
            return causal
        batch, tokens = qkv.shape[0], qkv.shape[1]
        q, k, v = op.split(qkv, [q_heads, q_heads + kv_heads], axis=2)
        if q_heads != kv_heads:
            k = op.repeat(k, q_heads // kv_heads, axis=2)
            v = op.repeat(v, q_heads // kv_heads, axis=2)
        scores = op.matmul(
            op.permute_dims(q, [0, 2, 1, 3]),
            op.permute_dims(k, [0, 2, 3, 1]),
            out_dtype="float32",
        )
        bias = op.reshape(self.attention_bias, (1, 1, tokens, tokens))
        weights = op.softmax(scores * sm_scale + bias, axis=-1)
        values = op.permute_dims(v, [0, 2, 1, 3]).astype("float32")
        dense = op.permute_dims(op.matmul(weights, values), [0, 2, 1, 3])
        rows = op.reshape(self.image_rows, (batch, tokens, 1, 1)).astype("float32")
        kept = causal.astype("float32")
        return (dense * rows + kept * (1.0 - rows)).astype(causal.dtype)
