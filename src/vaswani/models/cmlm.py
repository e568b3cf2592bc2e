"""The conditional masked language model (CMLM) of Mask-Predict (Ghazvininejad et al. 2019): the
translation encoder, a decoder of the same blocks without the causal mask, and a target-length
classifier.

The decoder reads the whole target at once, some of its tokens replaced by ``[MASK]``, and predicts
every position in parallel: P(y_i | y_obs, x) = softmax(Decoder(Embed(y_obs), Encoder(Embed(x)))_i
W_out). The length classifier is fairseq's ``pred_length``: a linear layer over the mean-pooled
encoder output (padding left out) giving logits for the target lengths 0 … max_len − 1.
"""

from __future__ import annotations

from torch import Tensor

from vaswani.config import ModelConfig
from vaswani.layers.blocks import BlockStack
from vaswani.layers.linear import Linear
from vaswani.layers.masks import padding_mask
from vaswani.models.transformer import EncodedSource, Transformer


class CMLM(Transformer):
    """The encoder-decoder :class:`~vaswani.models.transformer.Transformer` (its embeddings, encoder,
    output projection and ties) with a non-causal decoder, ``BlockStack(causal=False, cross=True)``,
    and ``length``, the classifier over ``cfg.max_len`` target lengths.

    ``src`` (batch, src_len) and ``tgt`` (batch, tgt_len) are token ids padded with ``pad_id``:
    ``tgt`` is the target itself (no BOS, no EOS), some tokens ``[MASK]``, and a padded position
    is neither attended to nor predicted from. Logits are (batch, tgt_len, tgt_vocab_size)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.decoder = BlockStack(cfg, cfg.n_decoder_layers, causal=False, cross=True)
        self.length = Linear(cfg.d_model, cfg.max_len)
        self.reset_parameters()  # the new parts as the rest (the output's tie is kept)

    @property
    def length_classes(self) -> int:
        """How many target lengths the classifier tells apart: 0 … max_len − 1."""
        return self.config.max_len

    def decode(
        self,
        tgt_in: Tensor,
        source: EncodedSource,
        need_weights: bool = False,
        last_only: bool = False,
        predict: Tensor | None = None,
    ) -> tuple[Tensor, list[dict[str, Tensor]]]:
        """Logits of every position of ``tgt_in`` (batch, tgt_len), the target with its [MASK]s,
        attending to every real target position and to the source (of the last position only with
        ``last_only``; with ``predict``, a (batch, tgt_len) boolean mask, of the positions it marks
        alone, (marked, vocab) in row-major order: the output projection, the largest product of a
        step, skips the rest); the attention weights by layer with ``need_weights``. With
        ``source.cache`` (:meth:`~vaswani.layers.blocks.BlockStack.new_cross_cache`) the source's
        keys and values are projected on the first call and reused."""
        y = self.tgt_embed(tgt_in)
        h, weights = self.decoder(
            y,
            mask=padding_mask(tgt_in, self.config.pad_id),
            memory=source.memory,
            memory_mask=source.mask,
            cache=source.cache,
            need_weights=need_weights,
        )
        if predict is not None:
            return self.output(h[predict]), weights
        return self.output(h[:, -1:] if last_only else h), weights

    def length_logits(self, source: EncodedSource) -> Tensor:
        """(batch, max_len): logits of the target's length from the mean of the encoder output over
        the real source tokens (an empty source gives the mean of none: zeros)."""
        keep = source.mask[:, 0, 0, :].unsqueeze(-1).to(source.memory.dtype)  # (batch, src_len, 1)
        pooled = (source.memory * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return self.length(pooled)
