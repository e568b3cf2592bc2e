"""The core, written once and composed into every model."""

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
