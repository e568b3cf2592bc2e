"""``vaswani train mlm``, ``vaswani fill-mask`` and the masked-LM side of ``evaluate``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from vaswani.cli.common import (
    add_model_flags,
    add_run_flags,
    add_train_flags,
    resume_changes,
    text_run_config,
)
from vaswani.config import RunConfig
from vaswani.errors import ConfigError
from vaswani.rundir import RunDir


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "mlm",
        help="pretrain a BERT by masked-token prediction",
        description="Pretrain a BERT with its masked-LM head, by BERT's recipe: 15%% of the tokens "
        "chosen, 80%% of those replaced by [MASK], 10%% by a random token, 10%% left as they are, "
        "fresh masks each time a window is seen. With no --text it trains on the English prose of "
        "Python's own documentation (pydoc_data, ships with Python; no download) for about 3.5 "
        "minutes, holds out its last 10%% and prints a fill-mask example. The run exports with "
        "vaswani export-hf as BertForMaskedLM.",
    )
    data = p.add_argument_group("data")
    data.add_argument("--text", type=Path, nargs="+", help="text files or folders to train on")
    data.add_argument("--vocab-size", type=int, help="WordPiece vocabulary size (default 4096)")
    data.add_argument("--valid-fraction", type=float, help="held-out end of the text (default 0.1)")
    data.add_argument("--mask-prob", type=float, help="fraction of the tokens chosen for prediction (0.15)")
    add_run_flags(p)
    add_model_flags(p, "encoder layers")
    add_train_flags(p)
    p.set_defaults(handler=cmd_train)


def add_fill_mask_parser(commands: Any) -> None:
    p = commands.add_parser(
        "fill-mask",
        help="predict the words behind [MASK] with a masked language model",
        description="Print the most likely pieces, with their probabilities, for each [MASK] written "
        "in TEXT, and the text filled with the best ones. The run must have a masked-LM head (task "
        "mlm: vaswani train mlm, or import-hf of a BertForMaskedLM).",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("text", nargs="+", metavar="TEXT", help='e.g. "The [MASK] statement exits a loop."')
    p.add_argument("--top-k", type=int, default=5, help="candidates shown for each [MASK] (default 5)")
    p.set_defaults(handler=cmd_fill_mask)


def run_config_from_args(args: argparse.Namespace) -> RunConfig:
    from vaswani.tasks.mlm import TASK, default_settings

    return text_run_config(
        args, TASK, "encoder_only", default_settings(), ("vocab_size", "valid_fraction", "mask_prob")
    )


def print_fill_mask(text: str, candidates: list[list[tuple[str, float]]]) -> None:
    """The candidates of each [MASK], one line each, and the text filled with the best ones."""
    from vaswani.tasks.mlm import filled

    print(text)
    for number, choices in enumerate(candidates, start=1):
        print(f"  [MASK] {number}: " + ", ".join(f"{piece} {prob:.3f}" for piece, prob in choices))
    print(f"  → {filled(text, candidates)}")


def cmd_train(args: argparse.Namespace) -> int:
    from vaswani.tasks import registry
    from vaswani.tasks.mlm import FILL_MASK_EXAMPLE, train_mlm

    started = time.perf_counter()
    if args.resume:
        run_dir = args.resume
        metrics, mlm, name = registry.resume(run_dir, args.quiet, "mlm", **resume_changes(args))
    else:
        run = run_config_from_args(args)
        run_dir = RunDir.new(args.out, "mlm").path
        metrics, mlm, name = train_mlm(run, run_dir, quiet=args.quiet)
    print(
        f"\nmasked-token loss {metrics['valid_loss']:.3f}  perplexity {metrics['perplexity']:.1f}  "
        f"accuracy {metrics['masked_accuracy']:.1%}  ({name}, {metrics['steps']} steps, "
        f"{metrics['tokens_per_second']:,.0f} tokens/s, total {time.perf_counter() - started:.0f} s)\n"
    )
    print_fill_mask(FILL_MASK_EXAMPLE, mlm.fill_mask(FILL_MASK_EXAMPLE))
    print(f'\nrun directory: {run_dir}\n  vaswani fill-mask {run_dir} "{FILL_MASK_EXAMPLE}"')
    return 0


def cmd_fill_mask(args: argparse.Namespace) -> None:
    from vaswani.tasks.mlm import MaskedLanguageModel

    if args.top_k < 1:
        raise ConfigError(f"--top-k must be >= 1, got {args.top_k}")
    mlm = MaskedLanguageModel.load(args.run_dir)
    results = [mlm.fill_mask(text, args.top_k) for text in args.text]  # every text checked first
    for text, candidates in zip(args.text, results, strict=True):
        print_fill_mask(text, candidates)
