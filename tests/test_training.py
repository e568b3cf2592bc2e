"""Training: the trainer (exact resume, checkpoints, accumulation), the schedules, and end to end a
tiny Transformer that learns to copy and to reverse sequences exactly."""

from __future__ import annotations

import itertools
import math
import random
import shutil

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import assert_resumed_like_whole, log_rows, write_reverse_task
from vaswani.config import ModelConfig, RunConfig, TrainConfig
from vaswani.data.batching import pad, seq2seq_batch
from vaswani.data.config import ParallelData
from vaswani.generation.config import DecodingConfig
from vaswani.generation.seq2seq import translate_ids
from vaswani.models.transformer import Transformer
from vaswani.tasks import lifecycle
from vaswani.tasks.translation import train_translation
from vaswani.training.checkpoint import list_checkpoints
from vaswani.training.losses import label_smoothed_nll
from vaswani.training.schedules import cosine, inverse_sqrt


def _run(tmp_path, name: str, max_steps: int, data: dict) -> RunConfig:
    model = ModelConfig.preset("tiny", dropout=0.1, tie_embeddings="output")
    train = TrainConfig(
        batch_tokens=300, max_steps=max_steps, lr=3e-3, warmup_steps=4, eval_every=1000,
        checkpoint_every=5, eval_sentences=8, seed=3,
    )  # fmt: skip
    return RunConfig("translation", model, train, ParallelData(**data, vocab_size=60))


def test_resumed_run_ends_with_the_same_weights(tmp_path):
    src, tgt = write_reverse_task(tmp_path)
    data = {"source": "files", "src": str(src), "tgt": str(tgt)}
    whole = tmp_path / "whole"
    train_translation(_run(tmp_path, "whole", 15, data), whole, quiet=True)

    parts = tmp_path / "parts"
    train_translation(_run(tmp_path, "parts", 10, data), parts, quiet=True)
    first_leg = load_file(parts / "model.safetensors")
    lifecycle.resume(parts, quiet=True, max_steps=15)

    assert_resumed_like_whole(whole, parts, first_leg, 15)


def test_a_run_killed_after_its_checkpoint_resumes_its_log_without_duplicate_or_missing_rows(tmp_path):
    """A run that logged steps 11 to 15 after its checkpoint at step 10, then died (its step-15
    checkpoint removed), resumes from step 10: the rows after it are dropped and written again, and
    the row at step 12 still averages steps 10 to 12 (the window since the row at step 9 is part of
    the checkpoint), so that the log is the uninterrupted run's, row for row."""
    src, tgt = write_reverse_task(tmp_path)
    data = {"source": "files", "src": str(src), "tgt": str(tgt)}

    def run(name: str) -> RunConfig:
        config = _run(tmp_path, name, 15, data)
        return RunConfig(
            config.task, config.model, config.train.replace(log_every=3, eval_every=5), config.data
        )

    whole, parts = tmp_path / "whole", tmp_path / "parts"
    train_translation(run("whole"), whole, quiet=True)
    train_translation(run("parts"), parts, quiet=True)
    shutil.rmtree(list_checkpoints(parts)[-1])  # as if killed before its step-15 checkpoint
    lifecycle.resume(parts, quiet=True, max_steps=15)

    def logged(folder):  # all but the clock's columns
        return [
            {k: v for k, v in row.items() if k not in ("seconds", "tokens_per_second")}
            for row in log_rows(folder)
        ]

    assert [(row["step"], row["kind"]) for row in log_rows(whole)] == [
        ("3", "train"), ("5", "eval"), ("6", "train"), ("9", "train"), ("10", "eval"),
        ("12", "train"), ("15", "train"), ("15", "eval"),
    ]  # fmt: skip
    assert logged(parts) == logged(whole)
    assert all(
        float(row["grad_norm"]) > 0 and float(row["tokens_per_second"]) > 0
        for row in log_rows(parts, "train")
    )


def test_checkpoints_are_complete_and_pruned(tmp_path):
    src, tgt = write_reverse_task(tmp_path)
    data = {"source": "files", "src": str(src), "tgt": str(tgt)}
    run = _run(tmp_path, "r", 15, data)
    run = RunConfig(run.task, run.model, run.train.replace(keep_checkpoints=2), run.data)
    train_translation(run, tmp_path / "r", quiet=True)
    kept = list_checkpoints(tmp_path / "r")
    assert [p.name for p in kept] == ["step_00000010", "step_00000015"]
    for path in kept:
        assert {f.name for f in path.iterdir()} == {
            "model.safetensors", "optimizer.pt", "trainer_state.json", "manifest.json",
        }  # fmt: skip
    assert not any(p.name.startswith(".tmp") for p in (tmp_path / "r" / "checkpoints").iterdir())


def test_inverse_sqrt_is_the_papers_schedule_rescaled():
    d_model, warmup = 512, 4000
    paper = [d_model**-0.5 * min(s**-0.5, s * warmup**-1.5) for s in (1, 100, 4000, 9000, 50000)]
    peak = d_model**-0.5 * warmup**-0.5
    ours = [inverse_sqrt(s, peak, warmup) for s in (1, 100, 4000, 9000, 50000)]
    assert ours == pytest.approx(paper, rel=1e-12)


def test_cosine_warms_up_then_decays_to_the_floor():
    values = [cosine(s, 1.0, 10, 110, 0.1) for s in range(1, 111)]
    assert values[9] == pytest.approx(1.0)
    assert all(a <= b for a, b in itertools.pairwise(values[:10]))
    assert all(a >= b for a, b in itertools.pairwise(values[10:]))
    assert values[-1] == pytest.approx(0.1)
    assert math.isclose(cosine(60, 1.0, 10, 110, 0.0), 0.5, rel_tol=1e-9)


class _SumOfSquares:
    """A task whose batches hold different numbers of items, so that averaging per batch
    instead of per item would give a different gradient."""

    def __init__(self, batches: list[torch.Tensor]) -> None:
        self.batches = batches

    def train_batches(self) -> list[torch.Tensor]:
        return self.batches

    def loss(self, model, batch):
        return ((model(batch) - 1.0) ** 2).sum(), batch.shape[0]

    def batch_tokens(self, batch) -> int:
        return batch.shape[0]

    def evaluate(self, model) -> dict[str, float]:
        return {}


def test_accumulated_batches_equal_one_large_batch(tmp_path):
    from vaswani.training.trainer import Trainer

    torch.manual_seed(0)
    a, b = torch.randn(3, 4), torch.randn(7, 4)
    cfg = TrainConfig(max_steps=1, lr=0.1, warmup_steps=0, schedule="constant", clip_norm=None)
    results = []
    for batches, accumulate in (([a, b], 2), ([torch.cat([a, b])], 1)):
        torch.manual_seed(1)
        model = torch.nn.Linear(4, 1)
        folder = tmp_path / f"acc{accumulate}"
        folder.mkdir()
        Trainer(model, _SumOfSquares(batches), cfg.replace(accumulate=accumulate), folder).fit(quiet=True)
        results.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    torch.testing.assert_close(results[0], results[1], rtol=1e-6, atol=1e-7)


# ----------------------------------------------------------------------------------------------
# A tiny model learns copy and reverse


PAD, BOS, EOS, VOCAB = 0, 1, 2, 12


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
