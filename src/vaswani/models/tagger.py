"""A token tagger: a BERT encoder with a classifier on each token (part-of-speech tagging, NER).

    h        = Bert(tokens, attention_mask)                      (batch, seq, d_model)
    logits_i = TokenClassifier(h)_i = Dropout(h_i) W_c + b_c     (batch, seq, n_tags)

The tokens are WordPiece pieces, so a word may be several tokens; a word's tag is predicted at its
first piece (the usual convention, BERT's for named entities): p(t_w | x) = softmax(logits_{f(w)})
where f(w) is the position of the first piece of word w. The later pieces of a word, [CLS], [SEP]
and padding are read by the encoder but never tagged. The encoder's tensors are ``bert.*``, the
classifier's ``head.*``.
"""

from __future__ import annotations

from torch import Tensor, nn

from vaswani.config import ModelConfig
from vaswani.models.bert import Bert, TokenClassifier


class BertTagger(nn.Module):
    """logits = TokenClassifier(Bert(x)): ``tokens`` and ``attention_mask`` (batch, seq; True or 1
    at real tokens) → logits (batch, seq, n_tags) of every token, or (n, n_tags) of the n tokens
    where the boolean ``predict`` (batch, seq) is True (the first pieces of the words, in row-major
    order: all that tagging and its loss need)."""

    def __init__(self, cfg: ModelConfig, n_tags: int) -> None:
        super().__init__()
        self.config = cfg
        self.bert = Bert(cfg)
        self.head = TokenClassifier(cfg, n_tags)

    def forward(
        self, tokens: Tensor, attention_mask: Tensor | None = None, predict: Tensor | None = None
    ) -> Tensor:
        hidden = self.bert(tokens, None, attention_mask)
        return self.head(hidden if predict is None else hidden[predict])
