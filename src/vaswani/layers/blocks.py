"""The Transformer block and a stack of them: the one block every model is built from.

Block = residual(self-attention) → [residual(cross-attention)] → residual(feed-forward),
with the norm's kind (LayerNorm, RMSNorm) and placement (post, pre) chosen by the config.
The encoder is a stack of non-causal blocks, the decoder a stack of causal blocks
with cross-attention, and a GPT a stack of causal blocks without it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from vaswani.config import ModelConfig
from vaswani.layers.attention import MultiHeadAttention
from vaswani.layers.cache import AttentionCache, KVCache, StaticKVCache
from vaswani.layers.feedforward import FeedForward
from vaswani.layers.norms import final_norm, make_norm, residual_for
from vaswani.layers.positions import query_key_positions, score_positions


class DropPath(nn.Module):
    """Stochastic depth (Huang et al. 2016) on a residual branch: in training, each sample's branch
    ``x`` (batch, ...) is zeroed with probability ``p`` and kept ones scaled by 1 / (1 − p), so that
    its expectation is unchanged; the identity in evaluation (timm's ``DropPath``)."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(1.0 - self.p)
        return x * keep / (1.0 - self.p)


def drop_path_rates(rate: float, n_layers: int) -> list[float]:
    """The drop-path rate of each of ``n_layers`` blocks: rising linearly from 0 at the first to
    ``rate`` at the last (timm's and DeiT's ``torch.linspace(0, rate, depth)``, here in Python floats,
    so that a model built on the meta device gets them too)."""
    return [rate * i / (n_layers - 1) for i in range(n_layers)] if n_layers > 1 else [0.0] * n_layers


@dataclass
class LayerCache:
    """Decoding state of one block: its self-attention and cross-attention KV caches (the
    self-attention's a rolling one where it has a window: :meth:`MultiHeadAttention.new_cache`;
    None where self-attention is recomputed each pass: :meth:`BlockStack.new_cross_cache`)."""

    self_attn: AttentionCache | None = field(default_factory=KVCache)
    cross_attn: AttentionCache = field(default_factory=KVCache)


class Block(nn.Module):
    """One layer: self-attention, optional cross-attention, feed-forward, each in a residual.

    post: x ← Norm(x + Dropout(Sublayer(x)))
    pre:  x ← x + Dropout(Sublayer(Norm(x)))

    Norm is ``cfg.norm`` (LayerNorm or RMSNorm), its placement ``cfg.norm_placement``. With
    ``drop_path`` p > 0, each Dropout(Sublayer(·)) also passes through :class:`DropPath` (p).
    """

    def __init__(self, cfg: ModelConfig, causal: bool, cross: bool, drop_path: float = 0.0) -> None:
        super().__init__()
        relative = score_positions(cfg, causal)
        qk_positions = query_key_positions(cfg)

        def attention(is_cross: bool) -> MultiHeadAttention:
            return MultiHeadAttention(
                cfg.d_model,
                cfg.n_heads,
                dropout=cfg.attn_dropout,
                bias=cfg.bias,
                fused=cfg.fused_qkv,
                n_kv_heads=cfg.n_kv_heads,
                cross=is_cross,
                causal=causal and not is_cross,
                window=None if is_cross else cfg.attn_window,
                relative=None if is_cross else relative,
                qk_positions=None if is_cross else qk_positions,
            )

        self.self_attn = attention(False)
        self.self_attn_norm = make_norm(cfg)
        self.cross_attn = attention(True) if cross else None
        self.cross_attn_norm = make_norm(cfg) if cross else None
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation, cfg.bias, cfg.ffn)
        self.ffn_norm = make_norm(cfg)
        self.dropout: nn.Module = nn.Dropout(cfg.dropout)
        if drop_path > 0.0:
            self.dropout = nn.Sequential(self.dropout, DropPath(drop_path))
        self.residual = residual_for(cfg)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: LayerCache | None = None,
        need_weights: bool = False,
        positions: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """``x`` (batch, seq, d_model) → same shape, and attention weights by name if asked.
        ``positions`` (batch | 1, cached + seq) are the position ids self-attention sees."""
        weights: dict[str, Tensor] = {}

        def self_attention(h: Tensor) -> Tensor:
            out, w = self.self_attn(
                h,
                mask=mask,
                cache=cache.self_attn if cache else None,
                need_weights=need_weights,
                positions=positions,
            )
            if w is not None:
                weights["self"] = w
            return out

        x = self.residual(x, self.self_attn_norm, self_attention, self.dropout)
        if self.cross_attn is not None and self.cross_attn_norm is not None:
            cross_attn = self.cross_attn

            def cross_attention(h: Tensor) -> Tensor:
                out, w = cross_attn(
                    h,
                    memory=memory,
                    mask=memory_mask,
                    cache=cache.cross_attn if cache else None,
                    need_weights=need_weights,
                )
                if w is not None:
                    weights["cross"] = w
                return out

            x = self.residual(x, self.cross_attn_norm, cross_attention, self.dropout)
        x = self.residual(x, self.ffn_norm, self.ffn, self.dropout)
        return x, weights


class BlockStack(nn.Module):
    """N blocks, plus the final norm that the pre placement needs (:func:`~vaswani.layers.norms.final_norm`;
    Identity for post); block i drops its residual branches at :func:`drop_path_rates` (cfg.drop_path)."""

    def __init__(self, cfg: ModelConfig, n_layers: int, causal: bool, cross: bool) -> None:
        super().__init__()
        rates = drop_path_rates(cfg.drop_path, n_layers)
        self.layers = nn.ModuleList(Block(cfg, causal, cross, rate) for rate in rates)
        self.final_norm = final_norm(cfg)
        self.checkpointing = False  # set by set_grad_checkpointing

    def new_cache(self, static: int | None = None) -> list[LayerCache]:
        """An empty cache per block, each layer's of the kind its attention decodes with; with
        ``static`` (columns), a :class:`~vaswani.layers.cache.StaticKVCache` of that many columns
        in every layer's self-attention, all writing at one shared position."""
        if static is None:
            return [LayerCache(self_attn=layer.self_attn.new_cache()) for layer in self.layers]
        position = torch.zeros((), dtype=torch.long, device=next(self.parameters()).device)
        return [LayerCache(self_attn=layer.self_attn.new_cache(static, position)) for layer in self.layers]

    def cross_keys_values(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Each cross-attention layer's keys and values of ``memory`` (batch, src_len, d_model),
        as its first step computes them (:meth:`MultiHeadAttention.keys_values`)."""
        return [layer.cross_attn.keys_values(memory) for layer in self.layers if layer.cross_attn is not None]

    def prime_cache(
        self, cache: list[LayerCache], memory: Tensor, keys_values: list[tuple[Tensor, Tensor]]
    ) -> None:
        """Ready ``cache`` for a first step like every later one: each layer's cross-attention
        cache filled with its ``keys_values`` (:meth:`cross_keys_values` of ``memory`` (batch,
        src_len, d_model)), as the first step would fill it, and its static self-attention
        buffers allocated for ``batch`` rows, as the first append would: a compiled step then
        serves the first step too."""
        crossing = iter(keys_values)
        for layer, layer_cache in zip(self.layers, cache, strict=True):
            attn = layer.self_attn
            if isinstance(layer_cache.self_attn, StaticKVCache):
                like = memory.new_empty(memory.shape[0], attn.n_kv_heads, 0, attn.d_head)
                layer_cache.self_attn.reserve(like, like)
            if layer.cross_attn is not None:
                layer_cache.cross_attn.append(*next(crossing))

    def new_cross_cache(self) -> list[LayerCache]:
        """Caches of cross-attention alone: the source's keys and values, projected on the first
        pass and reused, where self-attention re-reads the whole target each pass (a non-autoregressive
        decoder: Mask-Predict)."""
        return [LayerCache(self_attn=None) for _ in self.layers]

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        memory: Tensor | None = None,
        memory_mask: Tensor | None = None,
        cache: list[LayerCache] | None = None,
        need_weights: bool = False,
        positions: Tensor | None = None,
    ) -> tuple[Tensor, list[dict[str, Tensor]]]:
        """``x`` (batch, seq, d_model) → (batch, seq, d_model) and per-layer attention weights.

        ``positions`` (batch | 1, cached + seq) are the position ids of every token so far, the
        new ones last, threaded down to each self-attention: from the attention mask for
        left-padded rows (:func:`~vaswani.layers.positions.positions_from_mask`); None means
        0, 1, … after the cache."""
        all_weights = []
        recompute = self.checkpointing and self.training and torch.is_grad_enabled() and not cache
        for i, layer in enumerate(self.layers):
            args = (x, mask, memory, memory_mask, cache[i] if cache else None, need_weights, positions)
            if recompute:
                x, weights = checkpoint(layer, *args, use_reentrant=False)
            else:
                x, weights = layer(*args)
            all_weights.append(weights)
        if cache and isinstance(cache[0].self_attn, StaticKVCache):
            cache[0].self_attn.advance(x.shape[1])  # the position every layer's static cache shares
        return self.final_norm(x), all_weights


class Encoder(BlockStack):
    """Encoder: non-causal self-attention blocks; padding is masked through ``mask``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg, cfg.n_encoder_layers, causal=False, cross=False)


class Decoder(BlockStack):
    """Decoder: masked (causal) self-attention, cross-attention to the encoder output, feed-forward."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg, cfg.n_decoder_layers, causal=True, cross=True)


def set_grad_checkpointing(model: nn.Module, on: bool = True) -> None:
    """Recompute each block's activations in the backward pass instead of keeping them
    (``torch.utils.checkpoint``, non-reentrant, the dropout masks replayed), in every stack of
    ``model``: activation memory falls from O(layers) blocks' to about one block's."""
    for module in model.modules():
        if isinstance(module, BlockStack):
            module.checkpointing = on
