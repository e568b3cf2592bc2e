"""What the tests share: small data and the runs trained on it, copies of the fixture runs, the
checks and references the tests of several files use, and a task for the trainer."""

from __future__ import annotations

import csv
import hashlib
import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from vaswani.cli import main
from vaswani.config import ModelConfig, RunConfig, TrainConfig
from vaswani.data.config import TextData
from vaswani.errors import VaswaniError
from vaswani.io import WEIGHTS, load_weights, model_bytes
from vaswani.layers.linear import ACTIVATIONS, Linear
from vaswani.models.bert import Bert
from vaswani.models.gpt import GPT
from vaswani.rundir import RunDir
from vaswani.tokenizer import WordPieceTokenizer
from vaswani.training import trainer as trainer_module
from vaswani.training.checkpoint import MANIFEST, read_checkpoint, rng_state, set_rng_state, write_checkpoint

M = TypeVar("M", bound=nn.Module)


def write(path: Path, text: str) -> Path:
    """``text`` written to ``path`` in UTF-8; the path."""
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# Translation and language modelling


WORDS = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"]


def write_reverse_task(folder: Path, n: int = 400, seed: int = 0) -> tuple[Path, Path]:
    """Parallel files where the target is the source reversed."""
    rng = random.Random(seed)
    src, tgt = folder / "train.src", folder / "train.tgt"
    rows = [[rng.choice(WORDS) for _ in range(rng.randint(2, 6))] for _ in range(n)]
    src.write_text("".join(" ".join(r) + "\n" for r in rows), encoding="utf-8")
    tgt.write_text("".join(" ".join(reversed(r)) + "\n" for r in rows), encoding="utf-8")
    return src, tgt


def tiny_args(src: Path, tgt: Path, out: Path, *extra: str) -> list[str]:
    """``vaswani train translation`` arguments for a model that trains in a second or two."""
    return [
        "train", "translation", "--src", str(src), "--tgt", str(tgt), "--out", str(out),
        "--preset", "tiny", "--vocab-size", "60", "--batch-tokens", "400", "--max-steps", "6",
        "--eval-every", "1000", "--warmup", "2", "--quiet", *extra,
    ]  # fmt: skip


LM_WORDS = [
    "the", "cat", "sat", "on", "a", "mat", "and", "the", "dog", "ran", "to", "the", "red", "hat",
    "while", "birds", "sang",
]  # fmt: skip


def write_lm_text(path: Path, lines: int = 300, seed: int = 0) -> Path:
    """A small English-like text for a character-level language model."""
    rng = random.Random(seed)
    rows = [" ".join(rng.choice(LM_WORDS) for _ in range(rng.randint(4, 10))) for _ in range(lines)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def tiny_lm_args(text: Path, out: Path, *extra: str) -> list[str]:
    """``vaswani train lm`` arguments for a character-level GPT that trains in about a second (and
    no longer generates one repeated character)."""
    return [
        "train", "lm", "--text", str(text), "--out", str(out), "--tokenizer", "char",
        "--d-model", "32", "--heads", "2", "--d-ff", "64", "--layers", "1", "--max-len", "32",
        "--batch-tokens", "256", "--max-steps", "100", "--lr", "5e-3", "--max-minutes", "1",
        "--eval-every", "1000", "--warmup", "5", "--quiet", "--no-bf16", *extra,
    ]  # fmt: skip


def tiny_lm_run(folder: Path, *extra: str) -> Path:
    """Train the tiny language model of :func:`tiny_lm_args` in ``folder / "run"``."""
    text = write_lm_text(folder / "train.txt")
    assert main(tiny_lm_args(text, folder / "run", *extra)) == 0
    return folder / "run"


# ---------------------------------------------------------------------------------------------
# Masked language modelling and classification


COUNTING = "one two three four five six seven eight nine ten eleven twelve"


def write_repeated_text(path: Path, lines: int = 120) -> Path:
    """A repetitive text: line i is the i-th word of :data:`COUNTING` (cyclically) 20 times, so
    that a masked word is the word around it."""
    words = COUNTING.split()
    path.write_text(
        "".join(" ".join([words[i % len(words)]] * 20) + "\n" for i in range(lines)), encoding="utf-8"
    )
    return path


def tiny_mlm_args(text: Path, out: Path, *extra: str) -> list[str]:
    """``vaswani train mlm`` arguments for a one-layer BERT that trains in about two seconds."""
    return [
        "train", "mlm", "--text", str(text), "--out", str(out), "--vocab-size", "100",
        "--d-model", "32", "--heads", "2", "--d-ff", "64", "--layers", "1", "--max-len", "24",
        "--batch-tokens", "384", "--max-steps", "300", "--lr", "1e-2", "--warmup", "10",
        "--dropout", "0", "--eval-every", "1000", "--quiet", "--no-bf16", *extra,
    ]  # fmt: skip


def tiny_mlm_run(folder: Path, *extra: str) -> Path:
    """Train the model of :func:`tiny_mlm_args` on the repeated words in ``folder / "mlm"``."""
    text = write_repeated_text(folder / "repeated.txt")
    assert main(tiny_mlm_args(text, folder / "mlm", *extra)) == 0
    return folder / "mlm"


def encoder_run(folder: Path) -> Path:
    """A run of task ``encoder`` (a BERT without its MLM head, as imported from a ``BertModel``)."""
    tokenizer = WordPieceTokenizer.train([COUNTING] * 5, vocab_size=60, min_frequency=1, max_len=24)
    cfg = ModelConfig.preset(
        "bert-base", src_vocab_size=64, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, max_len=24
    )
    run = RunConfig("encoder", cfg, TrainConfig(), TextData(source="default"))
    return write_run_dir(folder / "encoder_run", run, Bert(cfg), {"tokenizer.json": tokenizer})


def write_sentiment(folder: Path, name: str, n: int, seed: int, suffix: str = "tsv") -> Path:
    """A trivially separable task: the label says whether the sentence holds a positive word."""
    rng = random.Random(seed)
    positive, negative = ["great", "good", "lovely", "fine"], ["awful", "bad", "poor", "dull"]
    filler = ["the", "a", "movie", "film", "plot", "was", "is", "very", "quite", "and", "it", "story"]
    rows = []
    for _ in range(n):
        label = rng.choice(["positive", "negative"])
        words = [rng.choice(filler) for _ in range(rng.randint(3, 8))]
        words.insert(rng.randint(0, len(words)), rng.choice(positive if label == "positive" else negative))
        rows.append((" ".join(words), label))
    if suffix == "jsonl":
        return write(
            folder / f"{name}.jsonl", "".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in rows)
        )
    return write(folder / f"{name}.tsv", "sentence\tlabel\n" + "".join(f"{t} \t{y}\n" for t, y in rows))


def tiny_classify_args(train: Path, dev: Path, out: Path, *extra: str) -> list[str]:
    """``vaswani train classify`` arguments for a one-layer model from scratch (about a second)."""
    return [
        "train", "classify", "--train", str(train), "--dev", str(dev), "--out", str(out),
        "--d-model", "32", "--heads", "2", "--d-ff", "64", "--layers", "1", "--vocab-size", "200",
        "--epochs", "5", "--lr", "5e-3", "--quiet", "--no-bf16", *extra,
    ]  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Run directories


# Run directories written by an earlier vaswani (test_old_run_dirs.py says which), their data as {DATA}.
FIXTURES = Path(__file__).parent / "fixtures" / "run_dirs"


def write_fixture_data(folder: Path) -> Path:
    """The data the fixtures were trained on, written again (the helpers are seeded)."""
    folder.mkdir()
    write_reverse_task(folder)
    write_lm_text(folder / "train.txt")
    write_repeated_text(folder / "repeated.txt")
    write_sentiment(folder, "train", 100, seed=0)
    write_sentiment(folder, "dev", 40, seed=1)
    return folder


def copied_run(task: str, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the fixture run of ``task`` in ``tmp_path``, pointed at its data written again there;
    the run and the data folder."""
    data = write_fixture_data(tmp_path / "data")
    run = tmp_path / task
    shutil.copytree(FIXTURES / task, run)
    config = run / "config.json"
    config.write_text(config.read_text(encoding="utf-8").replace("{DATA}", str(data)), encoding="utf-8")
    return run, data


def write_run_dir(run_dir: Path, run: RunConfig, model: nn.Module, tokenizers: dict[str, Any]) -> Path:
    """A run directory as training leaves one, for a model that was not trained: ``config.json``
    of ``run``, the model's weights and each tokenizer under its file name."""
    run_dir.mkdir()
    folder = RunDir(run_dir)
    folder.write_config(run)
    folder.save_weights(model)
    for name, tokenizer in tokenizers.items():
        tokenizer.save(run_dir / name)
    return run_dir


def perturb(model: M, scale: float) -> M:
    """``model`` with N(0, scale²) noise added to every parameter (biases and norms too), so that no
    weight keeps its initial value (a LayerNorm's ones and zeros would hide a misplaced norm)."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * scale)
    return model


def resign(checkpoint: Path) -> None:
    """Update the checkpoint's manifest to the files now there, as an attacker would."""
    manifest = {
        f.name: {"sha256": hashlib.sha256(f.read_bytes()).hexdigest(), "size": f.stat().st_size}
        for f in checkpoint.iterdir()
        if f.name != MANIFEST
    }
    (checkpoint / MANIFEST).write_text(json.dumps(manifest))


# ---------------------------------------------------------------------------------------------
# Checks and references


def log_rows(run: Path, kind: str | None = None) -> list[dict[str, str]]:
    """The rows of ``run``'s ``train_log.csv`` (only those of ``kind``, ``train`` or ``eval``, if given)."""
    with (run / "train_log.csv").open(newline="", encoding="utf-8") as f:
        return [row for row in csv.DictReader(f) if kind is None or row["kind"] == kind]


def assert_resumed_like_whole(
    whole: Path, parts: Path, first_leg: dict[str, torch.Tensor], steps: int
) -> None:
    """The run ``parts``, trained in two legs (``first_leg``: its weights after the first), ends with
    the weights of the uninterrupted run ``whole`` bit for bit, after ``steps`` steps."""
    a, b = load_file(whole / "model.safetensors"), load_file(parts / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert any(not torch.equal(first_leg[k], b[k]) for k in b), "resume did not train"
    assert json.loads((parts / "metrics.json").read_text())["steps"] == steps


def record_initial_state(monkeypatch: pytest.MonkeyPatch) -> dict[str, torch.Tensor]:
    """The state dict of the model that the trainer fits next, as it is before the first step
    (filled in when ``fit`` starts)."""
    seen: dict[str, torch.Tensor] = {}

    class Recording(trainer_module.Trainer):
        def fit(self, quiet: bool = False) -> dict[str, Any]:
            seen.update({k: v.clone() for k, v in self.model.state_dict().items()})
            return super().fit(quiet)

    monkeypatch.setattr(trainer_module, "Trainer", Recording)
    return seen


def one_line(exc: pytest.ExceptionInfo[VaswaniError]) -> str:
    """The message of a caught error, checked to be one line."""
    message = str(exc.value)
    assert message and "\n" not in message
    return message


def defined_mask(q_len: int, k_len: int, causal: bool, window: int | None) -> torch.Tensor:
    """The attention masks' definition, one pair at a time, as a (1, 1, q_len, k_len) may-attend
    mask: the queries are the last ``q_len`` of ``k_len`` positions; causal: a key not after the
    query; window: a key at most ``window`` away (|i - j| <= w, or 0 <= i - j <= w when causal)."""
    rows = [
        [
            (not causal or j <= i) and (window is None or abs(i - j) <= window)
            for j in range(k_len)
        ]
        for i in range(k_len - q_len, k_len)
    ]  # fmt: skip
    return torch.tensor(rows, dtype=torch.bool).reshape(1, 1, q_len, k_len)


def linear_reference(layer: Linear, x: torch.Tensor, activation: str) -> torch.Tensor:
    """What ``layer(x, activation)`` computes, by PyTorch's own path: activation(x Wᵀ + b)."""
    return ACTIVATIONS[activation](F.linear(x, layer.weight, layer.bias))


# ---------------------------------------------------------------------------------------------
# A task for the trainer


class LineTask:
    """The smallest task the trainer can run: fit y = 2x. Loss calls (counted from 1) listed in
    ``nan_loss`` give a NaN loss, those in ``nan_grad`` a finite loss with NaN gradients; ``on_call``
    runs a function at a given call."""

    def __init__(
        self,
        nan_loss: frozenset[int] = frozenset(),
        nan_grad: frozenset[int] = frozenset(),
        on_call: dict[int, Callable[[], object]] | None = None,
    ) -> None:
        generator = torch.Generator().manual_seed(0)
        self.batches = [torch.randn(4, 3, generator=generator) for _ in range(5)]
        self.nan_loss, self.nan_grad, self.on_call = nan_loss, nan_grad, on_call or {}
        self.calls = 0

    def train_batches(self) -> list[torch.Tensor]:
        return self.batches

    def loss(self, model: nn.Module, batch: torch.Tensor) -> tuple[torch.Tensor, int]:
        self.calls += 1
        self.on_call.get(self.calls, lambda: None)()
        pred = model(batch)
        loss = ((pred - 2 * batch) ** 2).sum()
        if self.calls in self.nan_loss:
            loss = loss * float("nan")
        if self.calls in self.nan_grad:
            loss = loss + torch.sqrt(pred.sum() * 0.0)  # sqrt'(0) = inf: finite loss, NaN gradient
        return loss, batch.shape[0]

    def batch_tokens(self, batch: torch.Tensor) -> int:
        return batch.shape[0]

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return {}


# ---------------------------------------------------------------------------------------------
# Position schemes on a tiny GPT


def position_gpt(
    kind: str, max_len: int = 32, window: int | None = None, n_heads: int = 2, n_kv_heads: int | None = None
) -> GPT:
    """A tiny float64 GPT with position scheme ``kind`` (and ``n_heads`` query heads sharing
    ``n_kv_heads`` key/value heads): small random weights and a head that maps token y to about
    y + 1, so that greedy decoding walks through the vocabulary."""
    cfg = ModelConfig(
        arch="decoder_only", tgt_vocab_size=24, d_model=16, n_heads=n_heads, n_kv_heads=n_kv_heads, d_ff=32,
        n_decoder_layers=2, dropout=0.0, norm="pre_ln", position=kind, max_len=max_len,
        tie_embeddings="none", scale_embeddings=False, attn_window=window,
    )  # fmt: skip
    torch.manual_seed(0)
    model = GPT(cfg).to(torch.float64).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.15)
        model.embed.token.weight.normal_(0.0, 1.0)
        model.output.weight.copy_(2 * model.embed.token.weight.roll(1, dims=0))
    return model


def left_padded(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompts as one left-padded batch of ids (pad 0) and its attention mask (True: a token)."""
    longest = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), longest, dtype=torch.long)
    mask = torch.zeros(len(prompts), longest, dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, longest - len(p) :], mask[i, longest - len(p) :] = torch.tensor(p), True
    return ids, mask


def save_checkpoint(
    run_dir: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    keep: int,
) -> Path:
    """Write ``checkpoints/step_N`` of a model and optimizer in this process, with this process's
    RNG states (see :func:`write_checkpoint`)."""
    extra = {"optimizer": optimizer.state_dict(), "rng": rng_state()}
    return write_checkpoint(run_dir, model_bytes(model), extra, state, keep)


def load_checkpoint(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Restore weights, optimizer and RNG states in this process; return the trainer state."""
    load_weights(model, path / WEIGHTS)
    extra, state = read_checkpoint(path)
    optimizer.load_state_dict(extra["optimizer"])
    set_rng_state(extra["rng"])
    return state
