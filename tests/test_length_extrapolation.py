"""Scoring a language model past its training context, as ``benchmarks/length_extrapolation.py``
does: ``stream_loss`` in windows of a given length, and a model rebuilt with a larger ``max_len``
and the trained weights loaded, which must compute what the trained model computes on the
positions that model has."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import position_gpt
from vaswani.models.gpt import GPT
from vaswani.pipelines.lm_text import stream_loss

VOCAB = 24  # position_gpt's vocabulary
PARAMETER_FREE = ["sinusoidal", "rope", "rope_interleaved", "alibi"]


@torch.no_grad()
def hand_loss(model: GPT, ids: torch.Tensor, context: int) -> float:
    """Each token after the first predicted once, from the tokens before it in its window of
    ``context`` (the windows start at 0, context, 2·context, …)."""
    losses = []
    for t in range(1, len(ids)):
        start = (t - 1) // context * context
        logits = model(ids[start:t][None])[0, -1]
        losses.append(float(F.cross_entropy(logits[None], ids[t][None])))
    return sum(losses) / len(losses)


def longer(model: GPT, max_len: int) -> GPT:
    """``model`` built again with context ``max_len``, its weights loaded (float64, eval)."""
    rebuilt = GPT(model.config.replace(max_len=max_len)).to(torch.float64).eval()
    rebuilt.load_state_dict(model.state_dict())
    return rebuilt


def ids_of(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("length", [3, 5, 8])
def test_stream_loss_scores_windows_of_the_given_length(length: int) -> None:
    model = position_gpt("rope", max_len=8)
    ids = ids_of(23)
    expected = hand_loss(model, ids, length)
    assert stream_loss(model, ids, batch_size=2, length=length) == pytest.approx(expected, rel=1e-6)
    assert stream_loss(model, ids, batch_size=16, length=length) == pytest.approx(expected, rel=1e-6)


def test_stream_loss_windows_default_to_the_context() -> None:
    model = position_gpt("alibi", max_len=8)
    ids = ids_of(30)
    assert stream_loss(model, ids) == stream_loss(model, ids, length=8)
    assert stream_loss(model, ids) != stream_loss(model, ids, length=4)


@pytest.mark.parametrize("kind", PARAMETER_FREE)
@torch.no_grad()
def test_a_model_rebuilt_with_a_longer_context_keeps_its_logits(kind: str) -> None:
    trained = position_gpt(kind, max_len=16)
    rebuilt = longer(trained, 64)
    batch = ids_of(48, seed=1).view(3, 16)
    torch.testing.assert_close(rebuilt(batch), trained(batch), rtol=0, atol=1e-12)
    long = ids_of(64, seed=2)[None]
    torch.testing.assert_close(rebuilt(long)[:, :16], trained(long[:, :16]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", PARAMETER_FREE)
def test_the_rebuilt_model_at_the_training_length_scores_as_the_trained_one(kind: str) -> None:
    trained = position_gpt(kind, max_len=16)
    rebuilt = longer(trained, 64)
    ids = ids_of(64 * 2 + 1, seed=3)
    own = stream_loss(trained, ids, batch_size=3)
    assert stream_loss(rebuilt, ids, batch_size=3, length=16) == pytest.approx(own, abs=1e-9)
    assert stream_loss(rebuilt, ids, length=64) == pytest.approx(hand_loss(rebuilt, ids, 64), rel=1e-6)


def test_learned_positions_cannot_be_rebuilt_longer() -> None:
    trained = position_gpt("learned", max_len=16)
    with pytest.raises(RuntimeError, match="size mismatch"):
        longer(trained, 64)
