"""The loss, and end to end: a tiny Transformer learns to copy and to reverse sequences."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from vaswani.config import ModelConfig
from vaswani.data.batching import pad, seq2seq_batch
from vaswani.generation.config import DecodingConfig
from vaswani.generation.seq2seq import translate_ids
from vaswani.models.transformer import Transformer
from vaswani.training.losses import label_smoothed_nll

DT = torch.float64
PAD, BOS, EOS, VOCAB = 0, 1, 2, 12


# ----------------------------------------------------------------------------------------------
# Label-smoothed loss


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


# ----------------------------------------------------------------------------------------------
# A tiny model learns copy and reverse


def _train_and_eval(task, steps=400, seed=0):
    torch.manual_seed(seed)
    rng = random.Random(seed)

    def examples(n):
        out = []
        for _ in range(n):
            s = [rng.randrange(3, VOCAB) for _ in range(rng.randint(3, 8))]
            out.append((s, list(s) if task == "copy" else s[::-1]))
        return out

    cfg = ModelConfig(
        src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=64, n_heads=4, d_ff=128,
        n_encoder_layers=2, n_decoder_layers=2, dropout=0.0, norm="pre_ln", max_len=16, pad_id=PAD,
    )  # fmt: skip
    model = Transformer(cfg)
    peak = 3e-3
    opt = torch.optim.Adam(model.parameters(), lr=peak, betas=(0.9, 0.98))
    model.train()
    for step in range(steps):
        # Warm up over 30 steps, hold, then decay linearly over the second half.
        for group in opt.param_groups:
            group["lr"] = peak * min((step + 1) / 30, 1.0, max(0.02, (steps - step) / (0.5 * steps)))
        batch = seq2seq_batch(examples(64), BOS, EOS, PAD)
        logits = model(batch.src, batch.tgt_in)
        loss = label_smoothed_nll(logits, batch.tgt_out, PAD, 0.0) / batch.n_tokens
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05

    test = examples(200)
    src = pad([s for s, _ in test], PAD)  # a padded batch of every length
    out = translate_ids(model, src, BOS, EOS, DecodingConfig(max_new_tokens=10)).tokens.tolist()
    wrong = []
    for (s, expected), row in zip(test, out, strict=True):
        produced = row[: row.index(EOS)] if EOS in row else row
        if produced != expected:
            wrong.append((s, expected, produced))
    return wrong


@pytest.mark.slow
@pytest.mark.parametrize("task,steps", [("copy", 300), ("reverse", 400)])
def test_tiny_model_learns_task_exactly(task, steps):
    wrong = _train_and_eval(task, steps)
    assert not wrong, f"{len(wrong)}/200 wrong, e.g. {wrong[:3]}"
