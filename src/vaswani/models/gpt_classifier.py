"""A GPT fine-tuned as a text classifier, as GPT-1 was (Radford et al. 2018, section 3.2)."""

from __future__ import annotations

from torch import Tensor, nn

from vaswani.config import ModelConfig
from vaswani.models.bert import SequenceClassifier
from vaswani.models.gpt import GPT

GPT_POOLS = ("last", "mean")


class GPTClassifier(nn.Module):
    """p(y | x) = softmax(W_y · Dropout(v(h)) + b_y), h = GPT(x)'s final hidden states.

    ``v`` is h at each row's last real token (``pool="last"``, GPT-1's: the causal model has read
    the whole text there) or the mean of h over the real tokens (``pool="mean"``). ``tokens`` and
    ``mask`` (batch, seq; True on real tokens) are right-padded rows: causal attention never lets
    a real token see the padding after it, and position ids count from each row's start, so each
    row's states are those of the row alone, and the GPT runs without a mask. The GPT's tensors
    are ``gpt.*`` (an lm run's weights, as they are), the classifier's ``head.*``.
    """

    def __init__(self, cfg: ModelConfig, n_classes: int, pool: str = "last") -> None:
        super().__init__()
        if pool not in GPT_POOLS:
            raise ValueError(f"a GPT classifier pools {' or '.join(GPT_POOLS)}, got {pool!r}")
        self.config, self.pool = cfg, pool
        self.gpt = GPT(cfg)
        self.head = SequenceClassifier(cfg, n_classes)

    def forward(self, tokens: Tensor, mask: Tensor, lm: bool = False) -> tuple[Tensor, Tensor | None]:
        """The class logits (batch, n_classes) and, with ``lm``, the GPT's next-token logits
        (batch, seq, vocab) of the same pass (for the auxiliary language-modelling loss)."""
        h, _ = self.gpt.hidden(tokens)
        if self.pool == "last":
            last = (mask.sum(dim=1) - 1).clamp(min=0)  # (batch,), on the device: no host read
            pooled = h.gather(1, last[:, None, None].expand(-1, 1, h.shape[-1]))[:, 0]
        else:
            weights = mask[..., None].to(h.dtype)
            pooled = (h * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        return self.head(pooled), self.gpt.output(h) if lm else None
