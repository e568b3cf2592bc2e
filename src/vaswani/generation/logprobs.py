"""Log-probabilities of tokens, as a server reports them (OpenAI's ``logprobs``).

For logits :math:`z` (rows, vocab) over the vocabulary, the log-probability of token :math:`t` is
:math:`\\log p(t) = z_t - \\log \\sum_j e^{z_j}` (``log_softmax``): the model's own distribution,
before any temperature, top-k or top-p shapes the draw. :func:`logprobs_of` gives, for each row,
the chosen token's log-probability and the ``top`` most likely tokens with theirs (best first);
:func:`prompt_logprobs` scores every token of a text given the ones before it (the first, which
nothing predicts, has none); :func:`sequence_log_probs` sums them over whole targets of an
encoder-decoder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from vaswani.data.batching import pad
from vaswani.models.gpt import GPT
from vaswani.models.transformer import EncodedSource, Transformer

MAX_TOP = 20  # the most alternatives a request may ask for (OpenAI's top_logprobs cap)


@dataclass(frozen=True)
class TokenLogprob:
    """One token's id and log-probability, and the ``top`` alternatives (id, log-probability),
    most likely first."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def logprobs_of(logits: Tensor, chosen: Tensor, top: int) -> list[TokenLogprob]:
    """For logits (rows, vocab) and the chosen ids (rows,): each row's :class:`TokenLogprob` with
    its ``top`` alternatives (0: none). Logits of -inf (padding of the embedding) stay impossible."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    picked = logp.gather(-1, chosen.view(-1, 1)).squeeze(-1).tolist()
    if top > 0:
        values, ids = logp.topk(min(top, logp.shape[-1]), dim=-1)
        rows = zip(ids.tolist(), values.tolist(), strict=True)
        alternatives = [tuple(zip(i, v, strict=True)) for i, v in rows]
    else:
        alternatives = [()] * len(picked)
    return [
        TokenLogprob(int(t), lp, alt)
        for t, lp, alt in zip(chosen.tolist(), picked, alternatives, strict=True)
    ]


@torch.no_grad()
def prompt_logprobs(
    model: GPT, ids: Sequence[int], top: int, vocab_size: int | None = None
) -> list[TokenLogprob | None]:
    """The log-probability of each of ``ids`` given those before it, in one forward pass of
    ``model`` (the first token: None); logits of ids >= ``vocab_size`` (the embedding's padding)
    are left out of the distribution. ``ids`` must fit the model's context."""
    if len(ids) < 2:
        return [None] * len(ids)
    device = next(model.parameters()).device
    tokens = torch.tensor([list(ids)], dtype=torch.long, device=device)
    logits = model(tokens)[0, :-1].float()  # (len - 1, vocab): the prediction of each next token
    if vocab_size is not None and vocab_size < logits.shape[-1]:
        logits[:, vocab_size:] = -torch.inf
    return [None, *logprobs_of(logits, tokens[0, 1:], top)]


def sequence_log_probs(
    model: nn.Module,
    src: Tensor,
    candidates: Sequence[Sequence[int]],
    bos_id: int,
    pad_id: int,
    rows: Tensor | None = None,
) -> Tensor:
    """log P(u | x) = Σ_t log P(u_t | u_<t, x) (N,) of each candidate u (its ids, EOS included where
    it ended) given its row of ``src`` (N, S), by an encoder-decoder ``model(src, tgt_in)``
    teacher-forced in one batch from ``bos_id`` (with gradients where the model has them): minimum
    risk training's candidates, and Mask-Predict's ranked by a teacher. With ``rows`` (N,), ``src``
    (B, S) holds each source once and candidate i is of source ``rows[i]``: a :class:`Transformer`
    encodes each source once, another model (the RNN) gets each candidate's source row."""
    targets = pad(candidates, pad_id).to(src.device)
    inputs = pad([(bos_id, *u[:-1]) for u in candidates], pad_id).to(src.device)
    if rows is not None and not isinstance(model, Transformer):
        src, rows = src[rows], None
    if rows is None:
        logits = model(src, inputs)
    else:
        assert isinstance(model, Transformer)  # for the type checker: the branch above took the rest
        encoded = model.encode(src)
        logits, _ = model.decode(inputs, EncodedSource(encoded.memory[rows], encoded.mask[rows]))
    log_probs = logits.to(torch.promote_types(logits.dtype, torch.float32)).log_softmax(dim=-1)
    picked = log_probs.gather(-1, targets[..., None])[..., 0]
    lengths = torch.tensor([len(u) for u in candidates], device=src.device)
    real = torch.arange(targets.shape[1], device=src.device)[None] < lengths[:, None]
    return (picked * real).sum(dim=1)
