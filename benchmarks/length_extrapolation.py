"""Length extrapolation (the table of Press et al. 2022, "Train Short, Test Long", measured here).

The character-level Shakespeare model of ``configs/shakespeare_char.yaml`` (4 layers, 4 heads,
128 dims, dropout 0, tied head; with sinusoidal positions the token embeddings × sqrt(128), as the
paper's) is trained at context 256 (batches of 12 × 256 characters) once
with each of ``position: sinusoidal``, ``learned``, ``rope`` and ``alibi``: the same seed, data,
batches and steps. Each trained model is then scored on the held-out split at evaluation lengths
256, 512, 1024 and 2048: the mean next-token loss (nats per character, fp32) over the first
N·2048 + 1 characters of the valid split (N = as many as fit), cut into non-overlapping windows of
that length, so that every length scores the same N·2048 tokens, each once.

To read windows longer than its training context, the model is built again with ``max_len`` 2048
and the trained weights loaded: sinusoidal, rotary and ALiBi positions have no parameters, so the
state dict is the same. Learned positions have one trained vector per position 0…255 and none
beyond: they get "n/a" past 256. The evaluation path is checked: at length 256 the rebuilt model's
loss equals that of the run's own model (``stream_loss``), or the script stops.

    nice -n 5 python benchmarks/length_extrapolation.py             # the four runs (12 minutes, quiet cores)
    python benchmarks/length_extrapolation.py --quick               # smoke run: a few tiny steps (seconds)
    python benchmarks/length_extrapolation.py --steps 500 --out runs/extrapolation   # keep the runs
    python benchmarks/length_extrapolation.py --results benchmarks/results/length_extrapolation.md
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import math
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from timing import cpu_description
from torch import Tensor

from vaswani.config import RunConfig
from vaswani.data.text import split_documents
from vaswani.errors import VaswaniError
from vaswani.models.gpt import GPT
from vaswani.pipelines.lm import LanguageModel
from vaswani.pipelines.lm_text import encode_documents, load_documents, stream_loss
from vaswani.rundir import RunDir
from vaswani.tasks import registry
from vaswani.tasks.lm import train_lm

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TEXT = REPO.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
CONFIG = REPO / "configs" / "shakespeare_char.yaml"
POSITIONS = ("sinusoidal", "learned", "rope", "alibi")
LENGTHS = (256, 512, 1024, 2048)
TRAIN_LEN = 256  # the training context (max_len of every trained model)
BATCH_WINDOWS = 12  # training windows of TRAIN_LEN a step, as nanoGPT's batch of 12
STEPS = 1000  # each run: about 2.5 minutes on 2 quiet CPU cores (0.15 s a step), 15 on busy ones
EVAL_TOKENS = 8192  # tokens in one evaluation batch (windows of a length: EVAL_TOKENS // length)
CHECK_TOLERANCE = 1e-5  # |rebuilt at 256 − own model| in nats
QUICK_STEPS = 4
QUICK_WINDOWS = 2  # training windows a step, and 2048-token stretches scored, in --quick


def run_config(text: Path, position: str, steps: int, quick: bool, threads: int | None) -> RunConfig:
    """The recipe of ``configs/shakespeare_char.yaml`` at context :data:`TRAIN_LEN` with ``position``,
    trained for ``steps`` (as ``vaswani train lm --text TEXT --config CONFIG`` with those overrides),
    on ``threads`` torch threads (None: the recipe's). Sinusoidal positions get the paper's token
    embeddings × sqrt(d_model) (Vaswani et al. 2017, 3.4): the recipe's N(0, 0.02) embeddings, unscaled,
    are drowned by the table's unit sines and the model stays at the unigram loss for hundreds of steps."""
    windows = QUICK_WINDOWS if quick else BATCH_WINDOWS
    train: dict[str, object] = {
        "max_steps": steps, "max_minutes": None, "batch_tokens": windows * TRAIN_LEN,
        "eval_every": max(1, steps // 6),
    }  # fmt: skip
    if threads is not None:
        train["threads"] = threads
    if quick:
        train.update(warmup_steps=1, eval_sentences=QUICK_WINDOWS)
    flags = {
        "data": {"text": [str(text)]},
        "model": {"position": position, "max_len": TRAIN_LEN, "scale_embeddings": position == "sinusoidal"},
        "train": train,
    }
    return registry.configure("lm", flags, config=CONFIG)


def scored_ids(run: RunConfig, lm: LanguageModel, stretches: int | None) -> Tensor:
    """The first N·2048 + 1 tokens of the held-out split (as ``train_lm`` encodes it), N as many as
    fit or ``stretches``: windows of every length in :data:`LENGTHS` then predict the same tokens."""
    documents, _ = load_documents(run.data)
    _, valid_docs = split_documents(documents, run.data.valid_fraction)
    ids = encode_documents(lm.tokenizer, valid_docs)
    n = (len(ids) - 1) // max(LENGTHS)
    if stretches is not None:
        n = min(n, stretches)
    if n == 0:
        raise SystemExit(f"the valid split has {len(ids)} tokens, fewer than {max(LENGTHS) + 1}")
    return ids[: n * max(LENGTHS) + 1]


def extended(model: GPT, max_len: int) -> GPT:
    """The same model built with context ``max_len`` and ``model``'s weights loaded (in eval mode).
    Only schemes without position parameters (sinusoidal, rope, alibi) load unchanged."""
    longer = GPT(model.config.replace(max_len=max_len)).to(next(model.parameters()).device)
    longer.load_state_dict(model.state_dict())
    return longer.eval()


def loss_at(model: GPT, ids: Tensor, length: int, vocab_size: int) -> float:
    """Mean next-token loss of ``model`` over ``ids`` in non-overlapping windows of ``length``."""
    batch = max(1, EVAL_TOKENS // length)
    return stream_loss(model, ids, batch_size=batch, vocab_size=vocab_size, length=length)


@dataclass
class Result:
    """One trained position scheme: its training figures and its loss at each evaluation length
    (None where the model has no positions that long)."""

    position: str
    steps: int
    train_seconds: float
    tokens_per_second: float
    valid_loss: float
    earlier: tuple[int, float] | None  # (step, valid loss) of the evaluation before the last
    own_loss: float
    tokens: int
    losses: dict[int, float | None]


def evaluations(run_dir: Path) -> list[tuple[int, float]]:
    """(step, validation loss) of every evaluation in ``run_dir/train_log.csv``, in order."""
    with open(run_dir / "train_log.csv", encoding="utf-8", newline="") as f:
        return [
            (int(row["step"]), float(row["valid_loss"])) for row in csv.DictReader(f) if row["kind"] == "eval"
        ]


def train_and_evaluate(run: RunConfig, run_dir: Path, stretches: int | None, quiet: bool) -> Result:
    """Train ``run`` into ``run_dir``, then score it at every length of :data:`LENGTHS`."""
    position = run.model.position
    metrics, lm, _ = train_lm(run, run_dir, quiet=quiet)
    print(
        f"{position}: {metrics['steps']} steps in {metrics['train_seconds']:.0f} s, "
        f"valid loss {metrics['valid_loss']:.4f}",
        flush=True,
    )
    history = evaluations(run_dir)
    ids = scored_ids(run, lm, stretches)
    vocab = lm.tokenizer.vocab_size
    lm.model.eval()
    own = loss_at(lm.model, ids, TRAIN_LEN, vocab)
    losses: dict[int, float | None] = {}
    if position == "learned":
        losses = {n: own if n == TRAIN_LEN else None for n in LENGTHS}
    else:
        longer = extended(lm.model, max(LENGTHS))
        losses = {n: loss_at(longer, ids, n, vocab) for n in LENGTHS}
        gap = abs(float(losses[TRAIN_LEN] or math.nan) - own)
        if not gap <= CHECK_TOLERANCE:
            raise SystemExit(
                f"{position}: the rebuilt model's loss at {TRAIN_LEN} differs from the run's own by {gap:.2e}"
            )
    print(f"{position}: " + ", ".join(f"{n}: {cell(v)}" for n, v in losses.items()), flush=True)
    return Result(
        position, metrics["steps"], metrics["train_seconds"], metrics["tokens_per_second"],
        metrics["valid_loss"], history[-2] if len(history) > 1 else None, own, len(ids) - 1, losses,
    )  # fmt: skip


def cell(loss: float | None) -> str:
    """A loss to four places, or n/a."""
    return "n/a" if loss is None else f"{loss:.4f}"


def markdown(results: list[Result], command: str, quick: bool) -> str:
    """The extrapolation table, the training table and the setting."""
    tokens = results[0].tokens
    lengths = " | ".join(f"{n}" for n in LENGTHS)
    lines = [
        f"Mean next-token loss (nats per character, fp32) on the same {tokens:,} held-out characters, "
        "at each evaluation length (training length 256):",
        "",
        f"| positions | {lengths} |",
        "|---|" + "---:|" * len(LENGTHS),
    ]
    for r in results:
        lines.append(f"| {r.position} | " + " | ".join(cell(r.losses[n]) for n in LENGTHS) + " |")
    lines += [
        "",
        "| positions | steps | train time | train tok/s | final valid loss (trainer's, context 256) "
        f"| one evaluation earlier | own model at 256 (the {tokens:,} characters) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        earlier = "n/a" if r.earlier is None else f"{r.earlier[1]:.4f} (step {r.earlier[0]})"
        lines.append(
            f"| {r.position} | {r.steps} | {r.train_seconds / 60:.1f} min | {r.tokens_per_second:,.0f} "
            f"| {r.valid_loss:.4f} | {earlier} | {r.own_loss:.4f} |"
        )
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    lines += [
        "",
        f"`{command}`{' (quick run: meaningless)' if quick else ''}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; CPU: {cpu_description()}; {now}.",
    ]
    return "\n".join(lines)


@contextlib.contextmanager
def run_dir(kept: Path | None, position: str) -> Iterator[Path]:
    """``kept``, or a temporary directory removed afterwards."""
    if kept is not None:
        yield kept
        return
    with tempfile.TemporaryDirectory(prefix=f"extrapolation-{position}-") as scratch:
        yield Path(scratch)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK_STEPS} tiny steps each")
    parser.add_argument("--text", type=Path, default=DEFAULT_TEXT, help="tinyshakespeare's input.txt")
    parser.add_argument("--steps", type=int, help=f"optimizer steps of each run (default {STEPS})")
    parser.add_argument("--out", type=Path, help="folder to keep the four run directories in")
    parser.add_argument("--results", type=Path, help="also write the tables to this markdown file")
    parser.add_argument(
        "--threads", type=int, help="torch threads (default: all cores; 1 is faster on busy shared cores)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    if not args.text.is_file():
        print(f"length_extrapolation: skipped: no {args.text} (pass tinyshakespeare's input.txt with --text)")
        return
    if args.steps is not None and args.steps < 1:
        parser.error("--steps: must be at least 1")
    steps = args.steps or (QUICK_STEPS if args.quick else STEPS)
    stretches = QUICK_WINDOWS if args.quick else None
    threads = torch.get_num_threads()
    print(f"CPU: {cpu_description()}; torch {torch.__version__}, {threads} threads", flush=True)
    results = []
    started = time.perf_counter()
    try:
        runs = [run_config(args.text, p, steps, args.quick, args.threads) for p in POSITIONS]
        kept = [RunDir.new(args.out / p, "lm").path if args.out else None for p in POSITIONS]
    except VaswaniError as exc:
        parser.error(str(exc))
    for run, keep in zip(runs, kept, strict=True):
        with run_dir(keep, run.model.position) as directory:
            results.append(train_and_evaluate(run, directory, stretches, args.quiet))
    command = "python benchmarks/length_extrapolation.py" + (" --quick" if args.quick else "")
    if args.steps is not None:
        command += f" --steps {args.steps}"
    if args.threads is not None:
        command += f" --threads {args.threads}"
    text = markdown(results, command, args.quick)
    print(f"\n{text}\n\ntotal {(time.perf_counter() - started) / 60:.1f} min")
    if args.results:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(f"# Length extrapolation\n\n{text}\n", encoding="utf-8")


if __name__ == "__main__":
    main()
