"""The core, written once and composed into every model.

- :mod:`~vaswani.layers.attention`: multi-head and grouped-query attention (project, mask and bias,
  attend), each layer's kind of KV cache (:mod:`~vaswani.layers.cache`: growing, rolling for a
  window, static for compiled decoding);
- :mod:`~vaswani.layers.local`: windowed self-attention in blocks, O(L · w), and the window
  convention |i − j| <= w; :mod:`~vaswani.layers.masks`: the one mask convention (True = may attend);
- :mod:`~vaswani.layers.positions`: the one home of positions (absolute tables, score schemes,
  rotary); :mod:`~vaswani.layers.norms`: kinds, placements, the final norm;
- :mod:`~vaswani.layers.feedforward` (plain or gated), :mod:`~vaswani.layers.blocks` (``Block``,
  ``BlockStack``, checkpointing, drop-path), :mod:`~vaswani.layers.embedding`,
  :mod:`~vaswani.layers.linear`, :mod:`~vaswani.layers.cross_entropy` (the LM head and its loss in
  one chunked pass);
- :mod:`~vaswani.layers.lora` (low-rank adapters of the projections, merged or not);
- :mod:`~vaswani.layers.quantize` (int8 and bf16 inference weights),
  :mod:`~vaswani.layers.blocked` (the weights in blocks for compiled batch-1 decoding) and
  :mod:`~vaswani.layers.kernels` (every machine-tuned choice, with what was measured).
"""

from vaswani.layers.attention import MultiHeadAttention
from vaswani.layers.blocks import Block, BlockStack, Decoder, Encoder, LayerCache
from vaswani.layers.cache import KVCache, RollingKVCache
from vaswani.layers.embedding import Embeddings
from vaswani.layers.feedforward import FeedForward
from vaswani.layers.linear import Linear
from vaswani.layers.masks import causal_mask, padding_mask, window_mask
from vaswani.layers.norms import RMSNorm
from vaswani.layers.positions import LearnedPositions, RelativePositions, SinusoidalPositions

__all__ = [
    "Block",
    "BlockStack",
    "Decoder",
    "Embeddings",
    "Encoder",
    "FeedForward",
    "KVCache",
    "LayerCache",
    "LearnedPositions",
    "Linear",
    "MultiHeadAttention",
    "RMSNorm",
    "RelativePositions",
    "RollingKVCache",
    "SinusoidalPositions",
    "causal_mask",
    "padding_mask",
    "window_mask",
]
