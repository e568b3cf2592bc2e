"""``vaswani train mlm``, ``vaswani fill-mask`` and the masked-LM side of ``evaluate``."""

from __future__ import annotations

import argparse
from typing import Any

from vaswani.cli.common import add_device_flag, add_run_command
from vaswani.errors import ConfigError


def add_fill_mask_parser(commands: Any) -> None:
    p = add_run_command(
        commands,
        "fill-mask",
        help="predict the words behind [MASK] with a masked language model",
        description="Print the most likely pieces, with their probabilities, for each [MASK] written "
        "in TEXT, and the text filled with the best ones. The run must have a masked-LM head (task "
        "mlm: vaswani train mlm, or import-hf of a BertForMaskedLM).",
    )
    p.add_argument("text", nargs="+", metavar="TEXT", help='e.g. "The [MASK] statement exits a loop."')
    p.add_argument("--top-k", type=int, default=5, help="candidates shown for each [MASK] (default 5)")
    add_device_flag(p)
    p.set_defaults(handler=cmd_fill_mask)


def cmd_fill_mask(args: argparse.Namespace) -> None:
    from vaswani.pipelines.mlm import MaskedLanguageModel, fill_mask_lines

    if args.top_k < 1:
        raise ConfigError(f"--top-k must be >= 1, got {args.top_k}")
    mlm = MaskedLanguageModel.load(args.run_dir, args.device)
    results = [mlm.fill_mask(text, args.top_k) for text in args.text]  # every text checked first
    for text, candidates in zip(args.text, results, strict=True):
        print("\n".join(fill_mask_lines(text, candidates)))
