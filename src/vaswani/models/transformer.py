"""The encoder-decoder Transformer of "Attention Is All You Need"."""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import Tensor, nn

from vaswani.config import ModelConfig
from vaswani.layers.blocks import Decoder, Encoder, LayerCache
from vaswani.layers.cache import new_positions
from vaswani.layers.embedding import Embeddings
from vaswani.layers.linear import Linear
from vaswani.layers.masks import padding_mask
from vaswani.layers.positions import embedding_positions, positions_from_mask


@dataclass
class EncodedSource:
    """What decoding needs from the source: encoder output, its padding mask, and the cache."""

    memory: Tensor
    mask: Tensor
    cache: list[LayerCache] | None = None

    def reorder(self, index: Tensor, sources: Tensor | None = None) -> None:
        """Keep the decoder rows ``index`` (their self-attention caches) and, if given, the source
        rows ``sources`` (memory, mask, cross-attention caches); without ``sources`` every source
        row is kept. A source row serves len(index) / len(sources) consecutive decoder rows (the
        hypotheses of beam search), which attend to it without copies of it (see
        :class:`~vaswani.layers.attention.MultiHeadAttention`)."""
        for layer in self.cache or []:
            layer.self_attn.reorder(index)
        if sources is not None:
            self.memory, self.mask = self.memory.index_select(0, sources), self.mask.index_select(0, sources)
            for layer in self.cache or []:
                layer.cross_attn.reorder(sources)


class Transformer(nn.Module):
    """P(y_t | y_<t, x) = softmax(Decoder(Embed(y_<t), Encoder(Embed(x))) W_out [+ b_out]).

    ``b_out`` exists with ``output_bias`` (Marian's ``final_logits_bias``).

    ``src`` (batch, src_len) and ``tgt_in`` (batch, tgt_len) are token ids padded
    with ``pad_id``; ``tgt_in`` is the target shifted right behind BOS (teacher
    forcing). Logits are (batch, tgt_len, tgt_vocab_size). A batch of no rows, or a ``tgt_in``
    of no tokens, gives the empty logits of that shape (an empty ``src`` is an empty sentence);
    an id outside the vocabulary or a sequence longer than ``max_len`` is an
    :class:`~vaswani.errors.InputError`.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.arch != "encoder_decoder":
            raise ValueError(f"Transformer needs arch='encoder_decoder', got {cfg.arch!r}")
        self.config = cfg
        d = cfg.d_model
        if cfg.word_dim is not None and cfg.tie_embeddings == "all":
            raise ValueError("a projected source word table (word_dim) cannot be shared with the target's")
        self.src_embed = Embeddings(
            cfg.src_vocab_size,
            d,
            embedding_positions(cfg),
            cfg.dropout,
            cfg.scale_embeddings,
            word_dim=cfg.word_dim,
        )
        shared = self.src_embed.token if cfg.tie_embeddings == "all" else None
        self.tgt_embed = Embeddings(
            cfg.tgt_vocab_size,
            d,
            embedding_positions(cfg),
            cfg.dropout,
            cfg.scale_embeddings,
            token=shared,
        )
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self.output = Linear(d, cfg.tgt_vocab_size, bias=cfg.output_bias)
        self.reset_parameters()
        if cfg.tie_embeddings != "none":
            self.output.weight = self.tgt_embed.token.weight

    def reset_parameters(self) -> None:
        """Xavier-uniform matrices (as the reference tensor2tensor code) and N(0, d^-1/2)
        embeddings, so that embeddings scaled by sqrt(d_model) have unit variance."""
        for name, p in self.named_parameters():
            if "norm" in name:
                continue
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        std = 1.0 / math.sqrt(self.config.d_model)
        for embed in (self.src_embed, self.tgt_embed):
            nn.init.normal_(embed.token.weight, 0.0, std)

    def encode(self, src: Tensor) -> EncodedSource:
        mask = padding_mask(src, self.config.pad_id)
        memory, _ = self.encoder(self.src_embed(src), mask)
        return EncodedSource(memory, mask)

    def decode(
        self,
        tgt_in: Tensor,
        source: EncodedSource,
        need_weights: bool = False,
        last_only: bool = False,
        target_mask: Tensor | None = None,
    ) -> tuple[Tensor, list[dict[str, Tensor]]]:
        """Decoder hidden states → logits (of the last position only with ``last_only``,
        all that generation needs). With ``source.cache`` set, ``tgt_in`` holds only the
        new tokens and their positions continue after the cached ones (the next columns of a
        static cache).

        ``target_mask`` (batch, cached + new), True on real target tokens, is needed only for
        left-padded decoder rows (continuous batching): it masks the padding keys of
        self-attention and gives each row's position ids, as a language model's attention mask
        does; without it every row's positions are 0, 1, … after the cache."""
        positions = key_mask = None
        if target_mask is not None:
            positions = positions_from_mask(target_mask)
            key_mask = target_mask[:, None, None, :]
        first = source.cache[0].self_attn if source.cache else None
        new, offset = new_positions(first, positions, tgt_in.shape[1])
        y = self.tgt_embed(tgt_in, positions=new, offset=offset)
        h, weights = self.decoder(
            y,
            mask=key_mask,
            memory=source.memory,
            memory_mask=source.mask,
            cache=source.cache,
            need_weights=need_weights,
            positions=positions,
        )
        return self.output(h[:, -1:] if last_only else h), weights

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        logits, _ = self.decode(tgt_in, self.encode(src))
        return logits

    def start_decoding(
        self, src: Tensor, static: int | None = None, memory: Tensor | None = None
    ) -> EncodedSource:
        """Encode once and attach an empty KV cache for incremental decoding (static caches of
        ``static`` columns in the decoder's self-attention when given); ``memory``: the encoder's
        output of ``src`` when it was computed already (a compiled encoder)."""
        if memory is None:
            source = self.encode(src)
        else:
            source = EncodedSource(memory, padding_mask(src, self.config.pad_id))
        source.cache = self.decoder.new_cache(static)
        return source
