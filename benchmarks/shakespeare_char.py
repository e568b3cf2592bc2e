"""nanoGPT's character-level Shakespeare recipe, trained through the API and scored on the whole valid split.

Runs ``configs/shakespeare_char.yaml`` (4 layers, 128 dims, context 64, 2000 steps; nanoGPT
reports a validation loss of about 1.88 for it on the CPU) exactly as ``vaswani train lm
--text input.txt --config configs/shakespeare_char.yaml`` would, then reports the mean
next-token loss over every character of the held-out last 10% (fp32), whether it meets the
target, the wall time, steps, training tokens/s, the best logged valid loss and a greedy and a
sampled continuation, with a markdown table to paste.

    python benchmarks/shakespeare_char.py                   # the 2000-step recipe (a few minutes)
    python benchmarks/shakespeare_char.py --large           # nanoGPT's 6-layer model for 20 minutes
    python benchmarks/shakespeare_char.py --quick           # smoke run: a few tiny steps (seconds)
    python benchmarks/shakespeare_char.py --out runs/shakespeare   # keep the run directory
"""

from __future__ import annotations

import argparse
import csv
import datetime
import math
import os
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vaswani.config import RunConfig
from vaswani.data.text import split_documents
from vaswani.errors import VaswaniError
from vaswani.generation.config import DecodingConfig
from vaswani.pipelines.lm import LanguageModel
from vaswani.pipelines.lm_text import encode_documents, load_documents, stream_loss
from vaswani.rundir import RunDir
from vaswani.tasks import registry
from vaswani.tasks.lm import train_lm

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TEXT = REPO.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
CONFIGS = {
    False: REPO / "configs" / "shakespeare_char.yaml",
    True: REPO / "configs" / "shakespeare_char_large.yaml",
}
TARGET = 1.88  # nanoGPT's README, CPU run of the small recipe
LARGE_REFERENCE = 1.47  # nanoGPT's README: the large model after 5000 iterations on a GPU
QUICK_STEPS = 4
QUICK_WINDOWS = 8  # windows per batch, and windows evaluated, in --quick
QUICK_CHARS = 20  # characters sampled in --quick
PROMPT = "\n"  # nanoGPT's sample.py starts from a newline
SAMPLE_CHARS = 200


def run_config(config: Path, text: Path, args: argparse.Namespace) -> RunConfig:
    """What ``vaswani train lm --text TEXT --config CONFIG`` trains (the lm recipe < the YAML), with
    this script's overrides."""
    train: dict[str, Any] = {}
    if args.bf16 is not None:
        train["precision"] = "bf16" if args.bf16 else "fp32"
    if args.threads is not None:
        train["threads"] = args.threads
    if args.steps is not None:
        train["max_steps"] = args.steps
    if args.minutes is not None:
        train["max_minutes"] = args.minutes
    if args.quick:
        max_len = registry.configure("lm", {"data": {"text": [str(text)]}}, config=config).model.max_len
        train.update(
            max_steps=QUICK_STEPS, max_minutes=None, warmup_steps=1, eval_every=QUICK_STEPS,
            eval_sentences=QUICK_WINDOWS, batch_tokens=QUICK_WINDOWS * max_len,
        )  # fmt: skip
    return registry.configure("lm", {"data": {"text": [str(text)]}, "train": train}, config=config)


def valid_ids(run: RunConfig, lm: LanguageModel) -> torch.Tensor:
    """The held-out split as the run's tokenizer encodes it (as ``train_lm`` does)."""
    documents, _ = load_documents(run.data)
    _, valid_docs = split_documents(documents, run.data.valid_fraction)
    return encode_documents(lm.tokenizer, valid_docs)


def best_logged(run_dir: Path) -> tuple[float, int]:
    """The lowest valid loss in ``train_log.csv`` and its step (evaluation rows only: the training
    rows between them leave ``valid_loss`` empty)."""
    with (run_dir / "train_log.csv").open(encoding="utf-8") as f:
        rows = [(float(r["valid_loss"]), int(r["step"])) for r in csv.DictReader(f) if r["valid_loss"]]
    return min(rows)


@dataclass
class Result:
    """One training run of a recipe and its scores."""

    recipe: str
    run: RunConfig
    metrics: dict[str, Any]
    wall_seconds: float
    valid_loss: float
    valid_tokens: int
    evaluated_windows: int
    best: tuple[float, int]
    greedy: str
    sampled: str


def train_and_score(run: RunConfig, run_dir: Path, recipe: str, quick: bool, quiet: bool) -> Result:
    """Train ``run`` into ``run_dir`` with ``train_lm``, then score it on the valid split and sample it."""
    start = time.perf_counter()
    metrics, lm, name = train_lm(run, run_dir, quiet=quiet)
    wall = time.perf_counter() - start
    print(f"trained on {name}: {metrics['steps']} steps in {wall:.0f} s", flush=True)
    ids = valid_ids(run, lm)
    windows = math.ceil((len(ids) - 1) / run.model.max_len)  # stream_loss's non-overlapping windows
    if quick:
        windows = min(windows, QUICK_WINDOWS)
    lm.model.eval()
    loss = stream_loss(lm.model, ids, max_windows=windows, vocab_size=lm.tokenizer.vocab_size)
    chars = QUICK_CHARS if quick else SAMPLE_CHARS
    greedy = lm.generate([PROMPT], DecodingConfig(max_new_tokens=chars, temperature=0.0))[0]
    sampled = lm.generate([PROMPT], DecodingConfig(max_new_tokens=chars, temperature=0.8, top_k=200, seed=0))[
        0
    ]
    return Result(recipe, run, metrics, wall, loss, len(ids), windows, best_logged(run_dir), greedy, sampled)


def markdown(result: Result, large: bool, quick: bool, threads: int) -> str:
    """The result as a markdown table, the environment and the two samples."""
    m, t, model = result.metrics, result.run.train, result.run.model
    if large:
        target = f"reference {LARGE_REFERENCE} (nanoGPT, 5000 steps on a GPU)"
        verdict = "n/a"
    else:
        target = f"<= {TARGET}"
        verdict = "**yes**" if result.valid_loss <= TARGET else "**no**"
    if quick:
        verdict += " (quick run: meaningless)"
    scope = (
        f"{result.evaluated_windows} windows spread over the valid split" if quick else "whole valid split"
    )
    lines = [
        f"| recipe | steps | train time | wall time | train tok/s | final valid loss ({scope}, fp32) "
        "| best logged valid loss | target | met |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
        f"| {result.recipe} ({model.n_layers}L/{model.d_model}d, context {model.max_len}, "
        f"{t.batch_tokens // model.max_len}×{model.max_len}, {t.precision}) "
        f"| {m['steps']} | {m['train_seconds']:.1f} s | {result.wall_seconds:.1f} s "
        f"| {m['tokens_per_second']:,.0f} | **{result.valid_loss:.4f}** "
        f"| {result.best[0]:.4f} (step {result.best[1]}) | {target} | {verdict} |",
    ]
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    lines.append(
        f"\ntorch {torch.__version__}, {threads} threads, {platform.machine()}, {os.cpu_count()} CPUs, "
        f"python {platform.python_version()}, {now}; valid split {result.valid_tokens:,} tokens; "
        f"lr {t.lr:g} → {t.min_lr:g} (cosine, warmup {t.warmup_steps}), seed {t.seed}"
    )
    for label, text in (
        ("greedy", result.greedy),
        ("sampled, temperature 0.8, top-k 200, seed 0", result.sampled),
    ):
        lines.append(f"\n{label}:\n\n```text\n{PROMPT.lstrip()}{text}\n```")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--large", action="store_true", help="nanoGPT's 6-layer, 384-dim model for 20 minutes"
    )
    parser.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK_STEPS} tiny steps")
    parser.add_argument("--text", type=Path, default=DEFAULT_TEXT, help="tinyshakespeare's input.txt")
    parser.add_argument("--config", type=Path, help="recipe YAML (default: the one of --large or not)")
    parser.add_argument("--out", type=Path, help="run directory to keep (default: a temporary one)")
    parser.add_argument("--steps", type=int, help="override max_steps")
    parser.add_argument("--minutes", type=float, help="override max_minutes")
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None, help="bf16 autocast")
    parser.add_argument("--threads", type=int, help="torch threads (default: all cores)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if not args.text.is_file():
        parser.error(f"{args.text}: no such file; pass tinyshakespeare's input.txt with --text")
    config = args.config or CONFIGS[args.large]
    try:
        out = RunDir.new(args.out, "lm").path if args.out else None
        run = run_config(config, args.text, args)
    except VaswaniError as exc:
        parser.error(str(exc))
    recipe = config.stem + (" --quick" if args.quick else "")
    print(f"{recipe}: {config}, text {args.text}", flush=True)
    with tempfile.TemporaryDirectory(prefix="shakespeare_char-") as scratch:
        result = train_and_score(run, out or Path(scratch), recipe, args.quick, args.quiet)
    if out:
        print(f"run directory: {out}")
    print()
    print(markdown(result, args.large, args.quick, torch.get_num_threads()))


if __name__ == "__main__":
    main()
