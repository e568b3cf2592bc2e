"""``vaswani train lm``, ``vaswani generate`` and the language-model side of ``evaluate``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from vaswani.cli.common import (
    add_model_flags,
    add_run_flags,
    add_train_flags,
    new_run_dir,
    resume_changes,
    text_run_config,
)
from vaswani.cli.decoding import decoding_from_args
from vaswani.config import LM_TOKENIZERS, RunConfig
from vaswani.data.readers import read_lines
from vaswani.data.text import read_documents
from vaswani.errors import ConfigError

SAMPLE_PROMPT = "The "
CONTEXT_POLICY = (
    "When the context (the model's max_len) is full, the oldest half of it is dropped and "
    "generation goes on with the most recent tokens in view."
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "lm",
        help="train a decoder-only language model (GPT)",
        description="Train a GPT on next-token prediction. With no --text it trains on the English "
        "prose of Python's own documentation (pydoc_data, ships with Python; no download), holds "
        "out its last 10%% and prints a sample.",
    )
    data = p.add_argument_group("data")
    data.add_argument("--text", type=Path, nargs="+", help="text files or folders to train on")
    data.add_argument("--tokenizer", choices=LM_TOKENIZERS, help="byte-level BPE (default) or characters")
    data.add_argument("--vocab-size", type=int, help="BPE vocabulary size")
    data.add_argument("--valid-fraction", type=float, help="held-out end of the text (default 0.1)")
    add_run_flags(p)
    add_model_flags(p, "decoder layers")
    add_train_flags(p)
    p.set_defaults(handler=cmd_train)


def add_generate_parser(commands: Any) -> None:
    p = commands.add_parser(
        "generate",
        help="continue a prompt with a trained language model",
        description="Continue each PROMPT (or the --prompt-file) token by token with a KV cache, "
        "streaming a single completion to the terminal as it is produced. " + CONTEXT_POLICY,
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("prompt", nargs="*", help="prompts, generated as one left-padded batch")
    p.add_argument("--prompt-file", type=Path, help="a prompt read from a file (few-shot examples...)")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=1.0, help="0 is greedy")
    p.add_argument("--top-k", type=int, help="sample among the K most likely tokens")
    p.add_argument("--top-p", type=float, help="sample among the most likely tokens of total probability P")
    p.add_argument("--seed", type=int, help="seed of the sampling (default: a fresh one)")
    p.add_argument("--stop", action="append", default=[], metavar="STRING", help="end at STRING (repeatable)")
    p.add_argument("--num-samples", type=int, default=1, help="completions per prompt")
    p.set_defaults(handler=cmd_generate, texts_field="prompt")


def run_config_from_args(args: argparse.Namespace) -> RunConfig:
    from vaswani.tasks.lm import default_settings

    return text_run_config(
        args, "lm", "decoder_only", default_settings(), ("tokenizer", "vocab_size", "valid_fraction")
    )


def cmd_train(args: argparse.Namespace) -> int:
    from vaswani.generation.config import DecodingConfig
    from vaswani.tasks.lm import resume_lm, train_lm

    started = time.perf_counter()
    if args.resume:
        run_dir = args.resume
        metrics, lm, name = resume_lm(run_dir, args.quiet, **resume_changes(args))
    else:
        run = run_config_from_args(args)
        run_dir = new_run_dir(args.out, "lm")
        metrics, lm, name = train_lm(run, run_dir, quiet=args.quiet)
    print(
        f"\nvalid loss {metrics['valid_loss']:.3f}  perplexity {metrics['perplexity']:.1f}  "
        f"({name}, {metrics['steps']} steps, {metrics['tokens_per_second']:,.0f} tokens/s, "
        f"total {time.perf_counter() - started:.0f} s)"
    )
    sample = lm.generate(
        [SAMPLE_PROMPT], DecodingConfig(max_new_tokens=120, temperature=0.8, top_k=50, seed=0)
    )[0]
    print(f"\nsample:\n{SAMPLE_PROMPT}{sample}\n")
    print(f'run directory: {run_dir}\n  vaswani generate {run_dir} "{SAMPLE_PROMPT}" --max-new-tokens 100')
    return 0


def cmd_generate(args: argparse.Namespace) -> None:
    from vaswani.tasks.lm import LanguageModel

    if args.prompt_file is not None and args.prompt:
        raise ConfigError("give the prompt as arguments or as --prompt-file, not both")
    if args.num_samples < 1:
        raise ConfigError(f"--num-samples must be >= 1, got {args.num_samples}")
    decoding = decoding_from_args(args)
    if args.prompt_file is not None:
        prompts = ["\n".join(read_lines(args.prompt_file, allow_empty_lines=True))]
    else:
        prompts = list(args.prompt) or [""]
    lm = LanguageModel.load(args.run_dir)
    batch = [p for p in prompts for _ in range(args.num_samples)]
    lm.encode_prompts(batch)  # a prompt too long for the context is refused before anything is printed
    if len(batch) == 1:
        sys.stdout.write(batch[0])
        sys.stdout.flush()

        def show(text: str) -> None:
            sys.stdout.write(text)
            sys.stdout.flush()

        lm.generate(batch, decoding, stream=show)
        sys.stdout.write("\n")
        return
    outputs = lm.generate(batch, decoding)
    for i, (prompt, text) in enumerate(zip(batch, outputs, strict=True)):
        if i:
            print("-" * 40)
        print(prompt + text)


def cmd_evaluate(args: argparse.Namespace) -> None:
    """Loss and perplexity of a language-model run on ``--text``."""
    import math

    from vaswani.tasks.lm import LanguageModel, encode_documents, stream_loss

    if not args.text:
        raise ConfigError("a language model is evaluated with --text FILE")
    lm = LanguageModel.load(args.run_dir)
    ids = encode_documents(lm.tokenizer, read_documents([str(t) for t in args.text]))
    loss = stream_loss(lm.model, ids, vocab_size=lm.tokenizer.vocab_size)
    print(f"loss {loss:.4f}  perplexity {math.exp(min(loss, 50.0)):.2f}  ({len(ids)} tokens)")
