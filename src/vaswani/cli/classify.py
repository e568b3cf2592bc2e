"""``vaswani train classify``, ``vaswani classify``, ``vaswani embed`` and the classifier side of
``evaluate``."""

from __future__ import annotations

import argparse
import io
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vaswani.cli.common import (
    MODEL_FLAGS,
    add_model_flags,
    add_run_flags,
    add_train_flags,
    merge_settings,
    new_run_dir,
    read_stdin,
    resume_changes,
)
from vaswani.config import LABELED_FORMATS, POOLS, DataConfig, ModelConfig, RunConfig, TrainConfig
from vaswani.errors import ConfigError, DataError

if TYPE_CHECKING:  # the task modules import torch: loaded when a command runs, not to parse flags
    from torch import Tensor

    from vaswani.tasks.classify import LabeledData
    from vaswani.tokenizer import WordPieceTokenizer

EMBED_FORMATS = (".npy", ".safetensors")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "classify",
        help="fine-tune a BERT text classifier on labeled examples",
        description="Fine-tune a classifier of texts or sentence pairs on --train, scored on --dev "
        "(accuracy and macro-F1 at each evaluation, by default once an epoch). The encoder starts "
        "from --init RUN_DIR (an mlm or encoder run: its weights, tokenizer and model) or from "
        "scratch. Files are TSV, CSV or JSON lines (by extension, or --format); a TSV or CSV file "
        "may have a header. By default the label is the column named 'label' (else the last one) "
        "and the text is the other column, or the other two as a sentence pair.",
    )
    data = p.add_argument_group("data")
    data.add_argument("--train", type=Path, help="labeled training examples (.tsv, .csv or .jsonl)")
    data.add_argument("--dev", type=Path, help="labeled examples to score on")
    data.add_argument("--format", choices=LABELED_FORMATS, help="file format (default: the extension)")
    data.add_argument(
        "--text-column",
        action="append",
        metavar="NAME|INDEX",
        help="a text column by header name or 0-based index; twice for a sentence pair",
    )
    data.add_argument(
        "--label-column", metavar="NAME|INDEX", help="the label column (default: 'label' or the last)"
    )
    data.add_argument("--init", type=Path, metavar="RUN_DIR", help="start from this mlm or encoder run")
    data.add_argument(
        "--pool", choices=POOLS, help="the text's vector: pooled [CLS] (default) or mean of tokens"
    )
    data.add_argument("--batch-size", type=int, help="examples per batch (default 32)")
    data.add_argument("--epochs", type=float, help="passes over --train (default 3; --max-steps overrides)")
    data.add_argument("--vocab-size", type=int, help="WordPiece vocabulary size from scratch (default 8000)")
    add_run_flags(p)
    add_model_flags(p, "encoder layers (from scratch)")
    add_train_flags(p)
    p.set_defaults(handler=cmd_train)


def add_command_parsers(commands: Any) -> None:
    p = commands.add_parser(
        "classify",
        help="label texts with a fine-tuned classifier",
        description="Print the predicted label of each TEXT (or of each line of standard input) and "
        "its probability, tab-separated. For a sentence-pair classifier, write the pair as A<TAB>B. "
        "A text longer than the model's max_len is cut to it (BERT's convention), with one warning line.",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument(
        "text", nargs="*", metavar="TEXT", help="texts to label (default: lines of standard input)"
    )
    p.add_argument("--batch-size", type=int, default=64)
    p.set_defaults(handler=cmd_classify, texts_field="text")
    p = commands.add_parser(
        "embed",
        help="sentence embeddings of a BERT run, and their cosine similarities",
        description="Embed each SENTENCE (or each line of standard input) with a BERT run (mlm, encoder "
        "or classify): the mean of its tokens' final hidden states (or the pooled [CLS] state), L2-"
        "normalised. Prints the first dimensions and the norm of each vector and the matrix of cosine "
        "similarities; --out writes the vectors (.npy, or .safetensors under the key 'embeddings'). "
        "A text longer than the model's max_len is cut to it, with one warning line.",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("text", nargs="*", metavar="SENTENCE", help="sentences (default: lines of standard input)")
    p.add_argument(
        "--pool", choices=POOLS[::-1], default="mean", help="mean of the tokens (default) or [CLS]"
    )
    p.add_argument(
        "--normalize", action=argparse.BooleanOptionalAction, default=True, help="divide by the L2 norm"
    )
    p.add_argument("--dims", type=int, default=6, help="dimensions shown of each vector (default 6)")
    p.add_argument("--out", type=Path, help="write the vectors to FILE.npy or FILE.safetensors")
    p.add_argument("--batch-size", type=int, default=64)
    p.set_defaults(handler=cmd_embed, texts_field="text")


def run_config_from_args(args: argparse.Namespace) -> tuple[RunConfig, LabeledData]:
    """The run's settings (defaults < --config < flags) and its examples, read to count the
    steps of the epochs."""
    from vaswani.tasks.classify import EPOCHS, TASK, default_settings, epoch_settings, load_labeled

    if args.train is None or args.dev is None:
        raise ConfigError("train classify needs --train and --dev files (or --resume RUN_DIR)")
    if args.batch_tokens is not None:
        raise ConfigError("--batch-tokens: a classifier's batches hold --batch-size examples")
    if args.init is not None:
        fixed = [
            f
            for f in (*MODEL_FLAGS, "layers", "preset")
            if f != "dropout" and getattr(args, f, None) is not None
        ]
        if fixed:
            raise ConfigError(
                f"--{fixed[0].replace('_', '-')}: the model of an --init run is fixed "
                "(only --dropout may change)"
            )
    model, train, data = default_settings(pretrained=args.init is not None)
    defaults = dict(model)
    data.update(source="labeled", train_file=str(args.train.resolve()), dev_file=str(args.dev.resolve()))
    source = merge_settings(args, model, train, data)
    if args.init is not None:
        changed = [k for k in model if k != "dropout" and model[k] != defaults.get(k)]
        if changed:
            raise ConfigError(
                f"{source}: config field 'model.{changed[0]}': the model of an --init run is fixed "
                "(only dropout may change)"
            )
        data["init"] = str(args.init.resolve())
    if args.layers is not None:
        model["n_encoder_layers"] = args.layers
    flags = {
        "format": "file_format", "label_column": "label_column", "pool": "pool",
        "batch_size": "batch_size", "vocab_size": "vocab_size",
    }  # fmt: skip
    for flag, name in flags.items():
        if getattr(args, flag) is not None:
            data[name] = getattr(args, flag)
    if args.text_column:
        data["text_columns"] = list(args.text_column)
    if args.epochs is not None and not args.epochs > 0:
        raise ConfigError(f"--epochs must be > 0, got {args.epochs}")
    spec = DataConfig.from_dict(data, source=source)
    examples = load_labeled(spec)
    train = epoch_settings(train, len(examples.train.examples), spec.batch_size, args.epochs or EPOCHS)
    run = RunConfig(
        TASK,
        ModelConfig.from_dict(model, source=source),
        TrainConfig.from_dict(train, source=source),
        spec,
    )
    return run, examples


def cmd_train(args: argparse.Namespace) -> int:
    from vaswani.tasks.classify import resume_classify, train_classify

    started = time.perf_counter()
    if args.resume:
        run_dir = args.resume
        metrics, _ = resume_classify(run_dir, args.quiet, **resume_changes(args))
    else:
        run, examples = run_config_from_args(args)
        run_dir = new_run_dir(args.out, "classify")
        metrics, _ = train_classify(run, run_dir, quiet=args.quiet, data=examples)
    print(
        f"\ndev accuracy {metrics['valid_accuracy']:.1%}  macro-F1 {metrics['valid_macro_f1']:.3f}  "
        f"loss {metrics['valid_loss']:.3f}  ({metrics['steps']} steps, "
        f"{metrics['tokens_per_second']:,.0f} tokens/s, total {time.perf_counter() - started:.0f} s)"
    )
    print(f'\nrun directory: {run_dir}\n  vaswani classify {run_dir} "a text to label"')
    return 0


def read_texts(given: Sequence[str]) -> list[str]:
    """The texts of the command line, or else the lines of standard input; none may be empty."""
    texts = list(given) or read_stdin()
    if not texts:
        raise DataError("no text given (as arguments or on standard input)")
    for number, text in enumerate(texts, start=1):
        if not text.strip():
            raise DataError(f"text {number} is empty")
    return texts


def warn_if_cut(tokenizer: WordPieceTokenizer, inputs: Sequence[tuple[str, ...]]) -> None:
    """One warning line on standard error when texts (or sentence pairs) are longer than the
    model's max_len, [CLS] and [SEP] included: the model reads them cut to it."""
    pieces = iter(tokenizer.encode_pieces_batch([text for parts in inputs for text in parts]))
    cut = []
    for number, parts in enumerate(inputs, start=1):
        length = sum(len(next(pieces)) for _ in parts) + len(parts) + 1
        if length > tokenizer.max_len:
            cut.append((number, length))
    if cut:
        number, length = cut[0]
        print(
            f"vaswani: warning: {len(cut)} of {len(inputs)} texts are longer than the model's max_len of "
            f"{tokenizer.max_len} tokens and were cut to it (the first: text {number}, {length} tokens)",
            file=sys.stderr,
        )


def cmd_classify(args: argparse.Namespace) -> None:
    from vaswani.tasks.classify import TextClassifier

    if args.batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {args.batch_size}")
    classifier = TextClassifier.load(args.run_dir)
    texts = read_texts(args.text)
    inputs = []
    for number, text in enumerate(texts, start=1):
        parts = tuple(text.split("\t", 1)) if classifier.n_texts == 2 else (text,)
        if len(parts) != classifier.n_texts:
            raise DataError(f"text {number}: a sentence-pair classifier needs the pair as A<TAB>B")
        inputs.append(parts)
    warn_if_cut(classifier.tokenizer, inputs)
    for label, prob in classifier.predict(inputs, args.batch_size):
        print(f"{label}\t{prob:.4f}")


def write_vectors(path: Path, vectors: Tensor) -> None:
    """The vectors (n, d) as ``.npy`` or as ``.safetensors`` (key ``embeddings``), written atomically."""
    import numpy as np
    from safetensors.torch import save

    from vaswani.io import atomic_write, write_error

    if path.suffix == ".npy":
        buffer = io.BytesIO()
        np.save(buffer, vectors.numpy())
        data = buffer.getvalue()
    else:
        data = save({"embeddings": vectors.contiguous()})
    try:
        atomic_write(path, data)
    except OSError as exc:
        raise write_error(path, exc) from None


def cmd_embed(args: argparse.Namespace) -> None:
    import torch

    from vaswani.tasks.classify import SentenceEncoder

    if args.out is not None and args.out.suffix not in EMBED_FORMATS:
        raise ConfigError(f"--out {args.out}: write .npy or .safetensors")
    if args.dims < 0 or args.batch_size < 1:
        raise ConfigError("--dims must be >= 0 and --batch-size >= 1")
    encoder = SentenceEncoder.load(args.run_dir)
    texts = read_texts(args.text)
    warn_if_cut(encoder.tokenizer, [(text,) for text in texts])
    vectors = encoder.embed(texts, args.pool, args.normalize, args.batch_size)
    shown = min(args.dims, vectors.shape[1])
    for number, (text, vector) in enumerate(zip(texts, vectors, strict=True), start=1):
        head = ", ".join(f"{x:+.4f}" for x in vector[:shown].tolist())
        more = ", …" if shown < len(vector) else ""
        print(f"{number}  [{head}{more}]  norm {float(vector.norm()):.4f}  {text}")
    unit = torch.nn.functional.normalize(vectors, dim=-1)
    similarity = unit @ unit.T
    print(f"\ncosine similarity ({vectors.shape[1]} dimensions, {args.pool} pooling)")
    print("     " + "".join(f"{j:>8}" for j in range(1, len(texts) + 1)))
    for i, row in enumerate(similarity.tolist(), start=1):
        print(f"{i:>5}" + "".join(f"{x:8.4f}" for x in row))
    if args.out is not None:
        write_vectors(args.out, vectors)
        print(f"\nwrote {tuple(vectors.shape)} vectors to {args.out}")


def cmd_evaluate(args: argparse.Namespace) -> None:
    """Loss, accuracy and macro-F1 of a ``classify`` run on ``--labeled``."""
    from vaswani.data.labeled import read_labeled
    from vaswani.tasks.classify import TextClassifier

    if args.labeled is None:
        raise ConfigError("a classifier is evaluated with --labeled FILE (TSV, CSV or JSON lines)")
    classifier = TextClassifier.load(args.run_dir)
    spec = classifier.data
    labeled = read_labeled(
        args.labeled, spec.text_columns, spec.label_column, args.format or spec.file_format, classifier.labels
    )
    metrics = classifier.evaluate(labeled, args.batch_size)
    print(
        f"accuracy {metrics['valid_accuracy']:.1%}  macro-F1 {metrics['valid_macro_f1']:.3f}  "
        f"loss {metrics['valid_loss']:.4f}  ({len(labeled.examples)} examples)"
    )
