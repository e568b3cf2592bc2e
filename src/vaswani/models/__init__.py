"""Models: thin compositions of the core layers, each docstring stating the model's probability.

:mod:`~vaswani.models.transformer` (the encoder-decoder), :mod:`~vaswani.models.gpt` (decoder-only:
GPT-2 and Llama shapes), :mod:`~vaswani.models.bert` (BERT, its masked-LM and next-sentence heads,
the classifier), :mod:`~vaswani.models.gpt_classifier`, :mod:`~vaswani.models.tagger`,
:mod:`~vaswani.models.vit` (the Vision Transformer), :mod:`~vaswani.models.cmlm` (Mask-Predict's
conditional masked LM) and :mod:`~vaswani.models.rnn` (the attentional RNN encoder-decoder).
"""

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
