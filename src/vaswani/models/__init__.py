"""Models: thin compositions of the core layers."""

from vaswani.models.transformer import EncodedSource, Transformer

__all__ = ["EncodedSource", "Transformer"]
