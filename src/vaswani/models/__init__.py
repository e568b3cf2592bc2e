"""Models: thin compositions of the core layers."""

from vaswani.models.gpt import GPT
from vaswani.models.transformer import EncodedSource, Transformer

__all__ = ["GPT", "EncodedSource", "Transformer"]
