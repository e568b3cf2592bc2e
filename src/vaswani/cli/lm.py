"""``vaswani train lm``, ``vaswani generate`` and the language-model side of ``evaluate``."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from vaswani.cli.common import add_device_flag, add_run_command, add_weights_flags
from vaswani.cli.decoding import add_compile_flag, compile_report, decoding_from_args
from vaswani.data.readers import read_lines
from vaswani.errors import ConfigError
from vaswani.generation.config import DecodingConfig
from vaswani.resources import decode_rows

CONTEXT_POLICY = (
    "When the context (the model's max_len) is full, the oldest half of it is dropped and "
    "generation goes on with the most recent tokens in view."
)


def add_generate_parser(commands: Any) -> None:
    p = add_run_command(
        commands,
        "generate",
        help="continue a prompt with a trained language model",
        description="Continue each PROMPT (or the --prompt-file) token by token with a KV cache, "
        "streaming a single completion to the terminal as it is produced. " + CONTEXT_POLICY,
    )
    p.add_argument("prompt", nargs="*", help="prompts, generated as one left-padded batch")
    p.add_argument("--prompt-file", type=Path, help="a prompt read from a file (few-shot examples...)")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=1.0, help="0 is greedy")
    p.add_argument("--top-k", type=int, help="sample among the K most likely tokens")
    p.add_argument("--top-p", type=float, help="sample among the most likely tokens of total probability P")
    p.add_argument("--seed", type=int, help="seed of the sampling (default: a fresh one)")
    p.add_argument("--stop", action="append", default=[], metavar="STRING", help="end at STRING (repeatable)")
    p.add_argument("--num-samples", type=int, default=1, help="completions per prompt")
    add_device_flag(p)
    add_compile_flag(p)
    add_weights_flags(p)
    p.add_argument(
        "--draft",
        type=Path,
        metavar="DRAFT_RUN",
        help="speculative decoding: a smaller lm run of the same tokenizer proposes tokens that the "
        "model checks in one pass; the output is the model's greedy one (needs --temperature 0 and "
        "one prompt); the acceptance rate goes to stderr",
    )
    p.add_argument(
        "--draft-tokens", type=int, metavar="K", help="tokens the draft proposes a round (default: adaptive)"
    )
    p.set_defaults(handler=cmd_generate, texts_field="prompt")


def cmd_generate(args: argparse.Namespace) -> None:
    """Generate: one streamed completion, or the batch of every prompt's ``--num-samples``, decoded
    in chunks of :func:`vaswani.resources.decode_rows` rows (chunk k seeded with ``--seed`` + k, so
    that a batch of one chunk is what it always was) and printed chunk by chunk."""
    from vaswani.layers.quantize import prepare_weights
    from vaswani.pipelines.common import model_device
    from vaswani.pipelines.lm import LanguageModel

    if args.prompt_file is not None and args.prompt:
        raise ConfigError("give the prompt as arguments or as --prompt-file, not both")
    if args.num_samples < 1:
        raise ConfigError(f"--num-samples must be >= 1, got {args.num_samples}")
    decoding = decoding_from_args(args)
    if args.prompt_file is not None:
        prompts = ["\n".join(read_lines(args.prompt_file, allow_empty_lines=True))]
    else:
        prompts = list(args.prompt) or [""]
    lm = LanguageModel.load(args.run_dir, args.device)
    prepare_weights(lm.model, args.quantize, args.dtype)
    if args.compile:
        lm.compile_decoding()
    batch = [p for p in prompts for _ in range(args.num_samples)]
    draft = load_draft(args, lm, decoding, len(batch))
    lm.encode_prompts(batch)  # a prompt too long for the context is refused before anything is printed
    if len(batch) == 1:
        sys.stdout.write(batch[0])
        sys.stdout.flush()

        def show(text: str) -> None:
            sys.stdout.write(text)
            sys.stdout.flush()

        lm.generate(batch, decoding, stream=show, draft=draft, draft_tokens=args.draft_tokens)
        sys.stdout.write("\n")
        compile_report(lm)
        if lm.speculation is not None:
            spec = lm.speculation
            print(
                f"speculative decoding: {spec.accepted} of {spec.proposed} draft tokens accepted "
                f"({spec.acceptance:.1%}), {spec.tokens.shape[1]} tokens in {spec.rounds} passes "
                "of the model",
                file=sys.stderr,
            )
        return
    size = decode_rows(lm.model.config, model_device(lm.model))
    for k, start in enumerate(range(0, len(batch), size)):
        chunk = batch[start : start + size]
        seed = None if decoding.seed is None else decoding.seed + k
        seeded = decoding if k == 0 else dataclasses.replace(decoding, seed=seed)
        for i, (prompt, text) in enumerate(zip(chunk, lm.generate(chunk, seeded), strict=True), start=start):
            if i:
                print("-" * 40)
            print(prompt + text)
    compile_report(lm)


def load_draft(args: argparse.Namespace, lm: Any, decoding: DecodingConfig, rows: int) -> Any:
    """The draft model of ``--draft`` (None without it), loaded on the model's device with the same
    ``--quantize`` and ``--dtype``; refused in one line with sampling, with several prompts or
    samples, or when its tokenizer is not the model's."""
    from vaswani.generation.speculative import check_speculative, is_greedy
    from vaswani.layers.quantize import prepare_weights
    from vaswani.pipelines.common import model_device
    from vaswani.pipelines.lm import LanguageModel

    if args.draft is None:
        if args.draft_tokens is not None:
            raise ConfigError("--draft-tokens goes with --draft")
        return None
    if args.draft_tokens is not None and args.draft_tokens < 1:
        raise ConfigError(f"--draft-tokens must be >= 1, got {args.draft_tokens}")
    if not is_greedy(decoding):
        raise ConfigError("--draft decodes greedily: give --temperature 0 and no --top-k/--top-p")
    if rows != 1:
        raise ConfigError(f"--draft decodes one prompt at a time (one prompt, --num-samples 1), got {rows}")
    draft = LanguageModel.load(args.draft, model_device(lm.model))
    if draft.tokenizer.tokenizer.to_str() != lm.tokenizer.tokenizer.to_str():
        raise ConfigError(
            f"--draft {args.draft}: its tokenizer is not the one of {args.run_dir} "
            "(speculative decoding needs the same vocabulary)"
        )
    check_speculative(lm.model, draft.model)
    return prepare_weights(draft.model, args.quantize, args.dtype)
