"""``vaswani train translation``, ``vaswani translate`` and the translation side of ``evaluate``.

Decoding is greedy by default; ``--beam K`` turns on beam search (the paper used K = 4 with a
GNMT length penalty of alpha = 0.6), ``--temperature``/``--top-k``/``--top-p`` sampling; the
flags become one :class:`~vaswani.generation.config.DecodingConfig` (:mod:`vaswani.cli.decoding`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vaswani.cli.common import add_device_flag, add_weights_flags, read_stdin, refuse_empty
from vaswani.cli.decoding import add_decoding_flags, add_sampling_flags, decoding_from_args
from vaswani.errors import ConfigError


def add_translate_parser(commands: Any) -> None:
    translate = commands.add_parser(
        "translate",
        help="translate sentences with a trained run",
        description="Translate the TEXT arguments, or standard input one line per sentence.",
    )
    translate.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    translate.add_argument("text", nargs="*", help="sentences (default: read standard input)")
    translate.add_argument("--batch-size", type=int, default=64)
    add_device_flag(translate)
    add_weights_flags(translate)
    decoding = add_decoding_flags(translate)
    decoding.add_argument(
        "--n-best",
        type=int,
        metavar="N",
        help="print the N best beam hypotheses of each sentence as 'INDEX<TAB>SCORE<TAB>TEXT' (N <= K)",
    )
    add_sampling_flags(translate)
    translate.set_defaults(handler=cmd_translate, texts_field="text")


def cmd_translate(args: argparse.Namespace) -> None:
    from vaswani.tasks.evaluation import prepare_inference
    from vaswani.tasks.translator import Translator

    if args.batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {args.batch_size}")
    decoding = decoding_from_args(args)
    if args.n_best is not None and decoding.strategy == "sample":
        raise ConfigError("--n-best lists come from beam search: drop --temperature, --top-k and --top-p")
    translator = Translator.load(args.run_dir, args.device)
    prepare_inference(translator.model, args.quantize, args.dtype)
    sentences = list(args.text) if args.text else [line.rstrip("\r\n") for line in read_stdin()]
    refuse_empty(sentences, "input line")
    if args.n_best is None:
        for line in translator.translate(sentences, decoding, batch_size=args.batch_size):
            print(line, flush=True)
        return
    found = translator.translate_n_best(sentences, decoding, batch_size=args.batch_size)
    for index, hypotheses in enumerate(found):
        for hypothesis in hypotheses:
            print(f"{index}\t{hypothesis.score:.4f}\t{hypothesis.text}", flush=True)
