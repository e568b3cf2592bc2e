"""The RNN encoder-decoder with attention that the Transformer replaced: Luong et al. (2015)'s global
attention with the "general" (multiplicative) score, over LSTMs (``--arch rnn``).

With ``d = d_model`` and ``L = n_layers`` (every stack), for a source x (batch, S) and a target
prefix y (batch, T)::

    h_1..h_S        = RNN_enc(sqrt(d) E_src x)         (batch, S, d)   L layers, left to right
    s_0             = tanh(W_b h_last)                 every decoder layer's first state (c_0 = 0)
    s_1..s_T        = RNN_dec(sqrt(d) E_tgt y; s_0)    (batch, T, d)   L layers
    a_tj            = softmax_j(s_t^T W_a h_j)         (batch, T, S)   padded positions j excluded
    c_t             = sum_j a_tj h_j                   (batch, T, d)
    h~_t            = tanh(W_c [c_t; s_t])             (batch, T, d)
    P(y_t | y_<t, x) = softmax(W_out h~_t + b)         W_out = E_tgt unless tie_embeddings none
                                                       (all: E_src = E_tgt too)

The embeddings are the Transformer's (:class:`~vaswani.layers.embedding.Embeddings` without
positions): tables drawn from N(0, 1/d), scaled by sqrt(d) (``scale_embeddings``), so that the
LSTMs read inputs of unit variance. Unscaled, the same tables give inputs of variance 1/d, every
gate starts near 1/2 whatever the token, and the model learns several times slower (on the
embedded en→zh corpus at Adam 1e-2: 55 BLEU after 400 steps unscaled, 95 scaled).

The encoder reads left to right, so that a sentence's states never see the padding after it (a
bidirectional encoder would, or would need packed sequences and the lengths on the host); there is
no input feeding (Luong's option that feeds h~_{t-1} to the next step), so that teacher forcing
runs the decoder over the whole target in one call, and a step of decoding is one step of the RNN.

The interface is the :class:`~vaswani.models.transformer.Transformer`'s that the decoding drivers
(:mod:`vaswani.generation.seq2seq`) use: ``encode``, ``start_decoding`` (the RNN's state as the
cache), ``decode(tokens, source, last_only)``, ``forward(src, tgt_in)`` → logits (batch, T, V).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from vaswani.config import ModelConfig
from vaswani.layers.embedding import Embeddings
from vaswani.layers.masks import padding_mask


@dataclass
class RNNSource:
    """What decoding needs from the source: the encoder states ``memory`` (batch, S, d), the
    padding mask (batch, 1, 1, S: True where a key may be attended), the decoder's first state
    ``first`` (batch, d) and, while decoding step by step, the LSTM's state ``cache``: (h, c), each
    (L, rows, d)."""

    memory: Tensor
    mask: Tensor
    first: Tensor
    cache: tuple[Tensor, Tensor] | None = None

    def reorder(self, index: Tensor, sources: Tensor | None = None) -> None:
        """Keep the decoder rows ``index`` (their RNN state) and, if given, the source rows
        ``sources``; a source row serves len(index) / len(sources) consecutive decoder rows (the
        hypotheses of beam search), as in :class:`~vaswani.models.transformer.EncodedSource`."""
        if self.cache is not None:
            self.cache = (self.cache[0].index_select(1, index), self.cache[1].index_select(1, index))
        if sources is not None:
            self.memory, self.mask = self.memory.index_select(0, sources), self.mask.index_select(0, sources)
            self.first = self.first.index_select(0, sources)


class RNNTranslator(nn.Module):
    """Luong et al.'s attentional encoder-decoder (see the module docstring); ``src`` (batch, S)
    and ``tgt_in`` (batch, T) are token ids padded with ``pad_id``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.arch != "rnn":
            raise ValueError(f"RNNTranslator needs arch='rnn', got {cfg.arch!r}")
        self.config = cfg
        d = cfg.d_model
        dropout = cfg.dropout if cfg.n_layers > 1 else 0.0
        src_vocab, tgt_vocab = cfg.src_vocab_size or cfg.vocab_size, cfg.tgt_vocab_size or cfg.vocab_size
        self.src_embed = Embeddings(src_vocab, d, None, cfg.dropout, cfg.scale_embeddings)
        shared = self.src_embed.token if cfg.tie_embeddings == "all" else None
        self.tgt_embed = Embeddings(tgt_vocab, d, None, cfg.dropout, cfg.scale_embeddings, token=shared)
        self.encoder = nn.LSTM(d, d, cfg.n_layers, batch_first=True, dropout=dropout)
        self.decoder = nn.LSTM(d, d, cfg.n_layers, batch_first=True, dropout=dropout)
        self.bridge = nn.Linear(d, d)
        self.score = nn.Linear(d, d, bias=False)
        self.combine = nn.Linear(2 * d, d, bias=False)
        self.output = nn.Linear(d, tgt_vocab, bias=True)
        self.drop = nn.Dropout(cfg.dropout)
        for embed in (self.src_embed, self.tgt_embed):
            nn.init.normal_(embed.token.weight, 0.0, 1.0 / math.sqrt(d))
        if cfg.tie_embeddings != "none":
            self.output.weight = self.tgt_embed.token.weight

    def encode(self, src: Tensor) -> RNNSource:
        """The encoder states of ``src`` (batch, S) and the decoder's first state, from the state
        at each row's last real token (the first state of an empty source is tanh(b))."""
        memory, _ = self.encoder(self.src_embed(src))
        real = src != self.config.pad_id
        last = (real.sum(dim=1) - 1).clamp(min=0)
        final = memory[torch.arange(src.shape[0], device=src.device), last] * real.any(dim=1, keepdim=True)
        return RNNSource(memory, padding_mask(src, self.config.pad_id), torch.tanh(self.bridge(final)))

    def start_decoding(self, src: Tensor) -> RNNSource:
        """Encode once and start the RNN's state for decoding step by step."""
        source = self.encode(src)
        source.cache = self._first_state(source, src.shape[0])
        return source

    def _first_state(self, source: RNNSource, rows: int) -> tuple[Tensor, Tensor]:
        """Every layer's first state for ``rows`` decoder rows (the hypotheses of a source share it)."""
        h = source.first.repeat_interleave(rows // source.first.shape[0], dim=0)
        h = h[None].expand(self.config.n_layers, -1, -1).contiguous()
        return h, torch.zeros_like(h)

    def decode(
        self, tgt_in: Tensor, source: RNNSource, need_weights: bool = False, last_only: bool = False
    ) -> tuple[Tensor, list[dict[str, Tensor]]]:
        """Logits (rows, T, V) of the target prefix ``tgt_in`` (rows, T) (of its last position with
        ``last_only``); with ``source.cache`` set, ``tgt_in`` holds only the new tokens and the
        cache moves on past them. ``need_weights`` adds the attention (rows, 1, T, S) under
        ``cross``."""
        rows = tgt_in.shape[0]
        state = source.cache if source.cache is not None else self._first_state(source, rows)
        states, new = self.decoder(self.tgt_embed(tgt_in), state)
        if source.cache is not None:
            source.cache = new
        if last_only:
            states = states[:, -1:]
        # A source row's consecutive decoder rows (beam hypotheses) attend to it together.
        queries = self.score(states).reshape(source.memory.shape[0], -1, states.shape[-1])
        scores = queries @ source.memory.transpose(1, 2)  # (batch, rows / batch · T, S)
        keep = source.mask[:, 0]  # (batch, 1, S)
        scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
        attention = scores.softmax(dim=-1) * keep.any(dim=-1, keepdim=True)
        context = (attention @ source.memory).reshape(states.shape)
        combined = torch.tanh(self.combine(torch.cat([context, states], dim=-1)))
        weights = [{"cross": attention.reshape(rows, 1, states.shape[1], -1)}] if need_weights else []
        return self.output(self.drop(combined)), weights

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        logits, _ = self.decode(tgt_in, self.encode(src))
        return logits
