"""Models: thin compositions of the core layers."""

from vaswani.models.bert import (
    Bert,
    MaskedLM,
    MaskedLMHead,
    SequenceClassifier,
    TokenClassifier,
)
from vaswani.models.gpt import GPT
from vaswani.models.transformer import EncodedSource, Transformer

__all__ = [
    "GPT",
    "Bert",
    "EncodedSource",
    "MaskedLM",
    "MaskedLMHead",
    "SequenceClassifier",
    "TokenClassifier",
    "Transformer",
]
