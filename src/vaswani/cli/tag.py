"""``vaswani tag``: the tag of each word of each text, from a ``tag`` run."""

from __future__ import annotations

import argparse
from typing import Any

from vaswani.cli.classify import read_texts
from vaswani.cli.common import add_device_flag, add_run_command
from vaswani.errors import ConfigError


def add_parser(commands: Any) -> None:
    p = add_run_command(
        commands,
        "tag",
        help="tag each word of texts with a trained tagger",
        description="Print each word of each TEXT (or of each line of standard input) with its tag, "
        "WORD<TAB>TAG a line and a blank line after each text: the column format that train tag and "
        "evaluate --labeled read. Words are split at white space, so write punctuation apart as the "
        "training sentences have it ('It works .'). A text longer than the model's max_len is read in "
        "spans of whole words, as in training.",
    )
    p.add_argument("text", nargs="*", metavar="TEXT", help="texts to tag (default: lines of standard input)")
    p.add_argument("--batch-size", type=int, default=64)
    add_device_flag(p)
    p.set_defaults(handler=cmd_tag, texts_field="text")


def cmd_tag(args: argparse.Namespace) -> None:
    from vaswani.pipelines.tag import Tagger

    if args.batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {args.batch_size}")
    tagger = Tagger.load(args.run_dir, args.device)
    sentences = [text.split() for text in read_texts(args.text)]
    for words, tags in zip(sentences, tagger.tag(sentences, args.batch_size), strict=True):
        print("".join(f"{word}\t{tag}\n" for word, tag in zip(words, tags, strict=True)))
