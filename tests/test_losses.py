"""The label-smoothed loss: its formula by hand, padding that contributes nothing (not even a
gradient), cross-entropy without smoothing, float32 under bf16 logits, an all-padding batch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vaswani.training.losses import label_smoothed_nll

DT = torch.float64
PAD, VOCAB = 0, 12


def _reference_loss(logits, target, pad_id, eps):
    """(1 - ε)(-log p_y) + ε · mean_v(-log p_v), summed over non-padding targets, by hand."""
    logp = logits.double().log_softmax(-1)
    total = torch.zeros((), dtype=DT)
    for b in range(target.shape[0]):
        for t in range(target.shape[1]):
            y = int(target[b, t])
            if y == pad_id:
                continue
            total += (1 - eps) * -logp[b, t, y] + eps * -logp[b, t].mean()
    return total


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_loss_matches_formula_without_padding(eps):
    torch.manual_seed(0)
    logits = torch.randn(3, 5, VOCAB) * 3
    target = torch.randint(3, VOCAB, (3, 5))
    loss = label_smoothed_nll(logits, target, PAD, eps)
    assert loss.shape == () and torch.isfinite(loss)
    torch.testing.assert_close(loss.double(), _reference_loss(logits, target, PAD, eps), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_padding_targets_contribute_nothing(eps):
    torch.manual_seed(1)
    logits = torch.randn(2, 6, VOCAB, requires_grad=True)
    target = torch.randint(3, VOCAB, (2, 6))
    target[0, 4:] = PAD
    target[1, 1:] = PAD
    loss = label_smoothed_nll(logits, target, PAD, eps)
    torch.testing.assert_close(loss.double(), _reference_loss(logits, target, PAD, eps), rtol=1e-5, atol=1e-4)
    # Changing the logits at padded targets changes nothing, not even slightly.
    changed = logits.detach().clone()
    changed[target == PAD] = torch.randn(int((target == PAD).sum()), VOCAB) * 10
    assert torch.equal(label_smoothed_nll(changed, target, PAD, eps), loss.detach())
    # Nor do they get a gradient.
    loss.backward()
    assert (logits.grad[target == PAD] == 0).all()
    assert (logits.grad[target != PAD].abs().sum(-1) > 0).all()
    # The same as the loss over the real targets only.
    real = label_smoothed_nll(logits[target != PAD][None], target[target != PAD][None], PAD, eps)
    torch.testing.assert_close(real, loss.detach())


def test_without_smoothing_equals_cross_entropy_sum():
    torch.manual_seed(2)
    logits = torch.randn(4, 3, VOCAB)
    target = torch.randint(3, VOCAB, (4, 3))
    target[2, 2] = PAD
    expected = F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=PAD, reduction="sum")
    torch.testing.assert_close(label_smoothed_nll(logits, target, PAD, 0.0), expected)
    # ...which is the negative log-likelihood of the real targets.
    logp = logits.log_softmax(-1).gather(-1, target[..., None])[..., 0]
    torch.testing.assert_close(expected, -logp[target != PAD].sum())


def test_smoothing_raises_the_loss_of_a_confident_correct_model():
    logits = torch.full((1, 2, VOCAB), -10.0)
    target = torch.tensor([[3, 4]])
    logits[0, 0, 3] = logits[0, 1, 4] = 10.0
    assert label_smoothed_nll(logits, target, PAD, 0.1) > label_smoothed_nll(logits, target, PAD, 0.0)


def test_loss_is_computed_in_float32():
    torch.manual_seed(3)
    logits = torch.randn(2, 4, VOCAB).to(torch.bfloat16)
    target = torch.randint(3, VOCAB, (2, 4))
    loss = label_smoothed_nll(logits, target, PAD, 0.1)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, label_smoothed_nll(logits.float(), target, PAD, 0.1))


def test_all_padding_batch_gives_zero_not_nan():
    logits = torch.randn(2, 3, VOCAB)
    target = torch.full((2, 3), PAD)
    loss = label_smoothed_nll(logits, target, PAD, 0.1)
    assert torch.isfinite(loss) and float(loss) == 0.0
