"""The decoder-only Transformer language model (GPT, Radford et al. 2018, 2019)."""

from __future__ import annotations

import math

import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.config import ModelConfig
from vaswani.layers.blocks import BlockStack, LayerCache
from vaswani.layers.cache import new_positions
from vaswani.layers.cross_entropy import linear_cross_entropy
from vaswani.layers.embedding import Embeddings
from vaswani.layers.linear import Linear
from vaswani.layers.positions import embedding_positions, positions_from_mask


class GPT(nn.Module):
    """P(x_t | x_<t) = softmax(LM_head(BlockStack_causal(Embed(x_<t)))).

    Causal blocks without cross-attention (GPT-2: pre-LN, GELU, learned positions,
    a final LayerNorm, the head tied to the token embedding). ``tokens`` (batch, seq) →
    logits (batch, seq, vocab); a batch of no rows or of no tokens gives the empty logits of that
    shape, and an id outside the vocabulary or a sequence longer than ``max_len`` is an
    :class:`~vaswani.errors.InputError`.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.arch != "decoder_only":
            raise ValueError(f"GPT needs arch='decoder_only', got {cfg.arch!r}")
        self.config = cfg
        d = cfg.d_model
        self.embed = Embeddings(
            cfg.vocab_size,
            d,
            embedding_positions(cfg),
            cfg.dropout,
            cfg.scale_embeddings,
        )
        self.blocks = BlockStack(cfg, cfg.n_layers, causal=True, cross=False)
        self.output = Linear(d, cfg.vocab_size, bias=cfg.output_bias)
        self.reset_parameters()
        if cfg.tie_embeddings != "none":
            self.output.weight = self.embed.token.weight

    def reset_parameters(self) -> None:
        """GPT-2's initialisation: N(0, 0.02) for matrices and embeddings, zero biases, and the
        projections that write into the residual stream scaled by 1/sqrt(2 · n_layers)."""
        residual_std = 0.02 / math.sqrt(2 * self.config.n_layers)
        for name, p in self.named_parameters():
            if "norm" in name:
                continue
            if p.dim() > 1:
                is_residual = name.endswith(("out_proj.weight", "ffn.linear2.weight", "ffn.down_proj.weight"))
                nn.init.normal_(p, 0.0, residual_std if is_residual else 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def new_cache(self, static: int | None = None) -> list[LayerCache]:
        """An empty KV cache per layer; with ``static``, static caches of that many columns
        (:class:`~vaswani.layers.cache.StaticKVCache`), whose ``attention_mask`` then covers
        those columns (see :meth:`forward`)."""
        return self.blocks.new_cache(static)

    def forward(
        self,
        tokens: Tensor,
        attention_mask: Tensor | None = None,
        cache: list[LayerCache] | None = None,
        last_only: bool = False,
        need_weights: bool = False,
        targets: Tensor | None = None,
        n_classes: int | None = None,
    ) -> Tensor:
        """Logits of the next token at each position (of the last one with ``last_only``).

        ``attention_mask`` (batch, cached + seq), True on real tokens, is needed only for
        left-padded batches: it masks the padding keys and gives the position ids, which the
        embedding and every self-attention use. With a
        ``cache`` the tokens continue after the cached ones. With a static cache
        (``new_cache(static=max_len)``) the tokens fill its next columns, and ``attention_mask``
        (batch, max_len) covers every column of its buffer (True on real tokens; the columns not
        filled yet may be True, causality masks them).

        With ``targets`` (batch, seq), the summed cross-entropy of predicting them instead (a 0-dim
        float32; the softmax over the first ``n_classes`` tokens, default all), through
        :func:`~vaswani.layers.cross_entropy.linear_cross_entropy`: the head and the loss in one
        chunked pass, so that the (batch, seq, vocab) logits are never held whole.
        """
        if targets is not None:
            h = self.hidden(tokens, attention_mask, cache)[0]
            if not isinstance(self.output, Linear):  # a quantized head (inference): its logits made whole
                logits = self.output(h)[..., :n_classes].float()
                return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum")
            return linear_cross_entropy(h, self.output.weight, self.output.bias, targets, n_classes)
        return self.run(tokens, attention_mask, cache, last_only, need_weights)[0]

    def run(
        self,
        tokens: Tensor,
        attention_mask: Tensor | None = None,
        cache: list[LayerCache] | None = None,
        last_only: bool = False,
        need_weights: bool = False,
    ) -> tuple[Tensor, list[dict[str, Tensor]]]:
        """:meth:`forward`, and the attention weights of each layer when asked for."""
        h, weights = self.hidden(tokens, attention_mask, cache, need_weights)
        return self.output(h[:, -1:] if last_only else h), weights

    def hidden(
        self,
        tokens: Tensor,
        attention_mask: Tensor | None = None,
        cache: list[LayerCache] | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, list[dict[str, Tensor]]]:
        """The final hidden states (batch, seq, d_model), after the stack's final norm, before the
        LM head (what a classifier on the GPT reads), and the attention weights when asked for."""
        positions = None
        key_mask = None
        if attention_mask is not None:
            positions = positions_from_mask(attention_mask)
            key_mask = attention_mask[:, None, None, :]
        new, offset = new_positions(cache[0].self_attn if cache else None, positions, tokens.shape[1])
        x = self.embed(tokens, positions=new, offset=offset)
        return self.blocks(x, mask=key_mask, cache=cache, need_weights=need_weights, positions=positions)
