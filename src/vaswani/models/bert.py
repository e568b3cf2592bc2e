"""BERT (Devlin et al. 2019): the encoder stack alone, read in both directions, and its heads.

    x      = Dropout(Norm(E[token] + P[position] + S[segment]))      (batch, seq, d_model)
    h      = BlockStack_bidirectional(x, padding mask)                (batch, seq, d_model)
    pooled = tanh(h_[CLS] W_p + b_p)                                  (batch, d_model)

BERT itself is post-LN with exact (erf) GELU, learned positions, two segments, unscaled
embeddings and LayerNorm's eps 1e-12 (the ``bert-base`` preset); every other norm placement and
position scheme of :class:`~vaswani.config.ModelConfig` builds and runs the same way. The heads
are small modules on top: :class:`MaskedLMHead` (the masked-token predictions, its decoder tied
to the word embeddings), :class:`NextSentenceHead` (IsNext or NotNext of a sentence pair, from
the pooled [CLS] vector), :class:`SequenceClassifier` (one label per text or sentence pair, from
the pooled [CLS] vector) and :class:`TokenClassifier` (one label per token).
:class:`MaskedLM` is :class:`Bert` with its MLM head (and, for next-sentence prediction, the NSP
head: Hugging Face's ``BertForPreTraining``), :class:`BertClassifier` with a
:class:`SequenceClassifier` on one vector per text (:func:`sentence_vectors`).

Masks follow :mod:`vaswani.layers.masks`: ``attention_mask`` is True (or 1) at real tokens, and
padding is masked out of every attention as a key, so that padding never changes the outputs
at real tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vaswani.config import ModelConfig
from vaswani.layers.blocks import BlockStack
from vaswani.layers.cross_entropy import linear_cross_entropy
from vaswani.layers.embedding import Embeddings
from vaswani.layers.linear import Linear
from vaswani.layers.norms import RMSNorm, make_norm
from vaswani.layers.positions import embedding_positions

INIT_STD = 0.02
POOLER_KEYS = ("pooler.dense.weight", "pooler.dense.bias")  # the tensors of the [CLS] pooler
IS_NEXT, NOT_NEXT = 0, 1  # the next-sentence head's classes (Hugging Face's next_sentence_label)


def init_bert_weights(module: nn.Module) -> None:
    """BERT's initialisation of one module (use with ``model.apply``): N(0, 0.02) for the
    matrices and embeddings, zero biases, norms with gain 1 and bias 0."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, 0.0, INIT_STD)
    if isinstance(module, (nn.LayerNorm, RMSNorm)):
        nn.init.ones_(module.weight)
    if isinstance(module, (nn.Linear, nn.LayerNorm)) and module.bias is not None:
        nn.init.zeros_(module.bias)


def mean_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """Sentence vectors as the mean over real tokens, e = Σ_i m_i h_i / Σ_i m_i (Sentence-BERT's
    pooling): ``hidden`` (batch, seq, d_model), ``attention_mask`` (batch, seq) → (batch, d_model)."""
    mask = attention_mask.to(hidden.dtype)[..., None]
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


class Pooler(nn.Module):
    """pooled = tanh(h_0 W_p + b_p): the hidden state of the first token ([CLS]) through a dense
    layer, ``(batch, seq, d_model) → (batch, d_model)``."""

    def __init__(self, d_model: int, bias: bool = True) -> None:
        super().__init__()
        self.dense = Linear(d_model, d_model, bias=bias)

    def forward(self, hidden: Tensor) -> Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))


class Bert(nn.Module):
    """h = BlockStack(Embed(tokens, segments), mask): bidirectional encoder blocks over token,
    position and segment embeddings, and the [CLS] pooler when the config has one.

    ``tokens`` and ``segments`` (batch, seq) → hidden states (batch, seq, d_model).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.arch != "encoder_only":
            raise ValueError(f"Bert needs arch='encoder_only', got {cfg.arch!r}")
        self.config = cfg
        d = cfg.d_model
        self.embed = Embeddings(
            cfg.vocab_size,
            d,
            embedding_positions(cfg),
            cfg.dropout,
            cfg.scale_embeddings,
            n_segments=cfg.type_vocab_size,
            norm=make_norm(cfg),
            word_dim=cfg.word_dim,
        )
        self.blocks = BlockStack(cfg, cfg.n_layers, causal=False, cross=False)
        self.pooler = Pooler(d, cfg.bias) if cfg.pooler else None
        self.apply(init_bert_weights)

    def forward(
        self, tokens: Tensor, segments: Tensor | None = None, attention_mask: Tensor | None = None
    ) -> Tensor:
        """Hidden states of ``tokens`` (batch, seq). ``segments`` (batch, seq) are the segment
        ids (0 for the first text, 1 for the second; all 0 when None); ``attention_mask``
        (batch, seq) is True or 1 at real tokens (all real when None). A batch of no rows or of
        no tokens gives the empty result of that shape; a token or segment id outside its
        embedding, or a sequence longer than ``max_len``, is an :class:`~vaswani.errors.InputError`."""
        return self.hidden(tokens, segments, attention_mask)[0]

    def hidden(
        self,
        tokens: Tensor,
        segments: Tensor | None = None,
        attention_mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, list[dict[str, Tensor]]]:
        """The hidden states of :meth:`forward` (batch, seq, d_model) and, with ``need_weights``,
        each layer's self-attention weights (``"self"``: batch, heads, seq, seq)."""
        key_mask = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
        return self.blocks(self.embed(tokens, segments=segments), mask=key_mask, need_weights=need_weights)

    def pool(self, hidden: Tensor) -> Tensor:
        """The pooled [CLS] vector (batch, d_model) of hidden states (batch, seq, d_model)."""
        if self.pooler is None:
            raise ValueError("this model has no pooler (config field 'model.pooler' is false)")
        return self.pooler(hidden)


class MaskedLMHead(nn.Module):
    """logits = Norm(act(h W_t + b_t)) Wᵀ + b: the prediction of each masked token.

    W is the word embedding E when ``word_embedding`` is given (tied, as BERT's), its own matrix
    otherwise; b is the head's own bias. ``hidden`` (..., d_model) → (..., vocab): pass only the
    positions whose predictions are needed. Building the head leaves a tied embedding unchanged.
    """

    def __init__(self, cfg: ModelConfig, word_embedding: nn.Embedding | None = None) -> None:
        super().__init__()
        d = cfg.d_model
        self.dense = Linear(d, d, bias=cfg.bias)
        self.activation = cfg.activation
        self.norm = make_norm(cfg)
        self.output = Linear(d, cfg.vocab_size)
        self.dense.apply(init_bert_weights)
        self.norm.apply(init_bert_weights)
        nn.init.zeros_(self.output.bias)
        if word_embedding is None:
            nn.init.normal_(self.output.weight, 0.0, INIT_STD)
        else:
            self.output.weight = word_embedding.weight

    def transform(self, hidden: Tensor) -> Tensor:
        """Norm(act(h W_t + b_t)), what the decoder W reads: (..., d_model) → (..., d_model)."""
        return self.norm(self.dense(hidden, self.activation))

    def forward(self, hidden: Tensor) -> Tensor:
        return self.output(self.transform(hidden))


class NextSentenceHead(nn.Module):
    """logits = pooled W_s + b_s: BERT's next-sentence prediction of a pair ``[CLS] A [SEP] B [SEP]``,
    class :data:`IS_NEXT` (B follows A in its document) or :data:`NOT_NEXT` (B is a random sentence
    of another document), Hugging Face's order. ``pooled`` (batch, d_model) → (batch, 2)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.linear = Linear(cfg.d_model, 2)
        self.apply(init_bert_weights)

    def forward(self, pooled: Tensor) -> Tensor:
        return self.linear(pooled)


class SequenceClassifier(nn.Module):
    """logits = Dropout(pooled) W_c + b_c: one label per text, or per sentence pair encoded as
    ``[CLS] A [SEP] B [SEP]`` with segment ids 0 then 1. ``pooled`` (batch, d_model) → (batch,
    n_classes)."""

    def __init__(self, cfg: ModelConfig, n_classes: int) -> None:
        super().__init__()
        self.dropout = nn.Dropout(cfg.dropout)
        self.linear = Linear(cfg.d_model, n_classes)
        self.apply(init_bert_weights)

    def forward(self, pooled: Tensor) -> Tensor:
        return self.linear(self.dropout(pooled))


class TokenClassifier(nn.Module):
    """logits_i = Dropout(h_i) W_c + b_c: one label per token (tagging, e.g. named entities).
    ``hidden`` (batch, seq, d_model) → (batch, seq, n_labels)."""

    def __init__(self, cfg: ModelConfig, n_labels: int) -> None:
        super().__init__()
        self.dropout = nn.Dropout(cfg.dropout)
        self.linear = Linear(cfg.d_model, n_labels)
        self.apply(init_bert_weights)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.linear(self.dropout(hidden))


class MaskedLM(nn.Module):
    """P(x_i | x̃) = softmax(MaskedLMHead(Bert(x̃))_i): the token at each masked position i of the
    corrupted input x̃, from both sides. The head's decoder is the word embedding unless
    ``tie_embeddings`` is "none". With ``nsp`` the model also has the next-sentence head
    (``nsp.*``) on the pooled [CLS] vector, P(IsNext | x̃) = softmax(NextSentenceHead(pooled)),
    which needs the pooler."""

    def __init__(self, cfg: ModelConfig, nsp: bool = False) -> None:
        super().__init__()
        self.config = cfg
        self.bert = Bert(cfg)
        if cfg.word_dim is not None and cfg.tie_embeddings != "none":
            raise ValueError("the MLM head cannot be tied to a projected word table (word_dim)")
        if nsp and not cfg.pooler:
            raise ValueError("the next-sentence head reads the pooled [CLS] vector: it needs model.pooler")
        tied = self.bert.embed.token if cfg.tie_embeddings != "none" else None
        self.head = MaskedLMHead(cfg, tied)
        self.nsp = NextSentenceHead(cfg) if nsp else None

    def forward(
        self,
        tokens: Tensor,
        segments: Tensor | None = None,
        attention_mask: Tensor | None = None,
        predict: Tensor | None = None,
        next_sentence: bool = False,
        targets: Tensor | None = None,
        n_classes: int | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Logits (batch, seq, vocab) of every position, or (n, vocab) of the n positions where
        the boolean ``predict`` (batch, seq) is True (the masked ones: all the loss needs). With
        ``next_sentence`` (a model with the NSP head), the pair (those logits, the next-sentence
        logits (batch, 2)).

        With ``targets`` (n,), the ids at the ``predict`` positions, the summed cross-entropy of
        predicting them takes the logits' place (a 0-dim float32; the softmax over the first
        ``n_classes`` tokens, default all), through
        :func:`~vaswani.layers.cross_entropy.linear_cross_entropy`: the decoder and the loss in one
        chunked pass, so that the (n, vocab) logits are never held whole."""
        hidden = self.bert(tokens, segments, attention_mask)
        chosen = hidden if predict is None else hidden[predict]
        if targets is None:
            logits = self.head(chosen)
        else:
            decoder = self.head.output
            logits = linear_cross_entropy(
                self.head.transform(chosen), decoder.weight, decoder.bias, targets, n_classes
            )
        if not next_sentence:
            return logits
        if self.nsp is None:
            raise ValueError("this model has no next-sentence head (an mlm run without --nsp)")
        return logits, self.nsp(self.bert.pool(hidden))


def sentence_vectors(bert: Bert, hidden: Tensor, attention_mask: Tensor, pool: str) -> Tensor:
    """v(x) (batch, d_model) of hidden states (batch, seq, d_model): ``"cls"`` is the pooled
    [CLS] state (the [CLS] state itself when the model has no pooler), ``"mean"`` the mean over
    the real tokens."""
    if pool == "mean":
        return mean_pool(hidden, attention_mask)
    return bert.pool(hidden) if bert.pooler is not None else hidden[:, 0]


class BertClassifier(nn.Module):
    """logits = SequenceClassifier(v(Bert(x))): ``tokens``, ``segments`` and ``attention_mask``
    (batch, seq) → (batch, n_classes). The encoder's tensors are ``bert.*``, the classifier's
    ``head.*``."""

    def __init__(self, cfg: ModelConfig, n_classes: int, pool: str = "cls") -> None:
        super().__init__()
        if pool == "cls" and not cfg.pooler:
            raise ValueError("pool='cls' needs a pooler (config field 'model.pooler')")
        self.config, self.pool = cfg, pool
        self.bert = Bert(cfg)
        self.head = SequenceClassifier(cfg, n_classes)

    def forward(
        self, tokens: Tensor, segments: Tensor | None = None, attention_mask: Tensor | None = None
    ) -> Tensor:
        mask = torch.ones_like(tokens, dtype=torch.bool) if attention_mask is None else attention_mask
        hidden = self.bert(tokens, segments, mask)
        return self.head(sentence_vectors(self.bert, hidden, mask, self.pool))
