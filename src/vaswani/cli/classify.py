"""``vaswani train classify``, ``vaswani classify``, ``vaswani embed`` and the classifier side of
``evaluate``."""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vaswani.cli.common import add_device_flag, add_run_command, read_stdin
from vaswani.cli.outputs import add_force_flag, check_output
from vaswani.data.config import POOLS
from vaswani.errors import ConfigError, DataError

if TYPE_CHECKING:  # the task modules import torch: loaded when a command runs, not to parse flags
    from torch import Tensor

    from vaswani.pipelines.encoder import SentenceEncoder
    from vaswani.tokenizer import WordPieceTokenizer

EMBED_FORMATS = (".npy", ".safetensors")


def add_command_parsers(commands: Any) -> None:
    p = add_run_command(
        commands,
        "classify",
        help="label texts with a fine-tuned classifier",
        description="Print the predicted label of each TEXT (or of each line of standard input) and "
        "its probability, tab-separated. For a sentence-pair classifier, write the pair as A<TAB>B. "
        "A text longer than the model's max_len is cut to it (BERT's convention), with one warning line.",
    )
    p.add_argument(
        "text", nargs="*", metavar="TEXT", help="texts to label (default: lines of standard input)"
    )
    p.add_argument("--batch-size", type=int, default=64)
    add_device_flag(p)
    p.set_defaults(handler=cmd_classify, texts_field="text")
    p = add_run_command(
        commands,
        "embed",
        help="sentence embeddings of a BERT run, and their cosine similarities",
        description="Embed each SENTENCE (or each line of standard input) with a BERT run (mlm, encoder, "
        "classify or tag): the mean of its tokens' final hidden states (or the pooled [CLS] state), L2-"
        "normalised. Prints the first dimensions and the norm of each vector and the matrix of cosine "
        "similarities; --out writes the vectors (.npy, or .safetensors under the key 'embeddings'). "
        "A text longer than the model's max_len is cut to it, with one warning line. --tokens prints "
        "each token's contextual vector (its final hidden state) instead; --word WORD the contextual "
        "vector of WORD in each sentence (the mean of its WordPiece pieces) and their cosine similarities.",
    )
    p.add_argument("text", nargs="*", metavar="SENTENCE", help="sentences (default: lines of standard input)")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument(
        "--tokens", action="store_true", help="print each token's contextual vector (first dims and norm)"
    )
    shown.add_argument(
        "--word",
        metavar="WORD",
        help="compare WORD's contextual vectors across the sentences (each must contain it)",
    )
    p.add_argument(
        "--pool", choices=POOLS[::-1], default="mean", help="mean of the tokens (default) or [CLS]"
    )
    p.add_argument(
        "--normalize", action=argparse.BooleanOptionalAction, default=True, help="divide by the L2 norm"
    )
    p.add_argument("--dims", type=int, default=6, help="dimensions shown of each vector (default 6)")
    p.add_argument("--out", type=Path, help="write the vectors to FILE.npy or FILE.safetensors")
    add_force_flag(p)
    p.add_argument("--batch-size", type=int, default=64)
    add_device_flag(p)
    p.set_defaults(handler=cmd_embed, texts_field="text")


def read_texts(given: Sequence[str]) -> list[str]:
    """The texts of the command line, or else the lines of standard input; none may be empty."""
    from vaswani.pipelines.common import refuse_empty

    texts = list(given) or read_stdin()
    if not texts:
        raise DataError("no text given (as arguments or on standard input)")
    return refuse_empty(texts, "text")


def warn_if_cut(tokenizer: WordPieceTokenizer, inputs: Sequence[tuple[str, ...]]) -> None:
    """One warning line on standard error when texts (or sentence pairs) are longer than the
    model's max_len, [CLS] and [SEP] included: the model reads them cut to it."""
    pieces = iter(tokenizer.encode_pieces_batch([text for parts in inputs for text in parts]))
    warn_of_cuts(
        [sum(len(next(pieces)) for _ in parts) + len(parts) + 1 for parts in inputs], tokenizer.max_len
    )


def warn_of_cuts(lengths: Sequence[int], max_len: int) -> None:
    """The warning line of :func:`warn_if_cut`, from each input's length in tokens."""
    cut = [(number, length) for number, length in enumerate(lengths, start=1) if length > max_len]
    if cut:
        number, length = cut[0]
        print(
            f"vaswani: warning: {len(cut)} of {len(lengths)} texts are longer than the model's max_len of "
            f"{max_len} tokens and were cut to it (the first: text {number}, {length} tokens)",
            file=sys.stderr,
        )


def cmd_classify(args: argparse.Namespace) -> None:
    from vaswani.pipelines.classify import TextClassifier, uncut_lengths
    from vaswani.tokenizer import LMTokenizer

    if args.batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {args.batch_size}")
    classifier = TextClassifier.load(args.run_dir, args.device)
    texts = read_texts(args.text)
    inputs = []
    for number, text in enumerate(texts, start=1):
        parts = tuple(text.split("\t", 1)) if classifier.n_texts == 2 else (text,)
        if len(parts) != classifier.n_texts:
            raise DataError(f"text {number}: a sentence-pair classifier needs the pair as A<TAB>B")
        inputs.append(parts)
    if isinstance(classifier.tokenizer, LMTokenizer):  # a GPT classifier
        warn_of_cuts(uncut_lengths(classifier.tokenizer, inputs), classifier.model.config.max_len)
    else:
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
    from vaswani.pipelines.encoder import SentenceEncoder

    if args.out is not None and args.out.suffix not in EMBED_FORMATS:
        raise ConfigError(f"--out {args.out}: write .npy or .safetensors")
    if args.dims < 0 or args.batch_size < 1:
        raise ConfigError("--dims must be >= 0 and --batch-size >= 1")
    if args.tokens and args.out is not None:
        raise ConfigError("--out writes sentence or word vectors, not those of --tokens")
    check_output(args.out, "--out", force=args.force)
    encoder = SentenceEncoder.load(args.run_dir, args.device)
    texts = read_texts(args.text)
    warn_if_cut(encoder.tokenizer, [(text,) for text in texts])
    if args.tokens:
        print_token_vectors(encoder, texts, args.dims)
        return
    if args.word is not None:
        vectors = encoder.word_vectors(args.word, texts)
        caption = f"of {args.word!r}, the mean of its pieces"
    else:
        vectors = encoder.embed(texts, args.pool, args.normalize, args.batch_size)
        caption = f"{args.pool} pooling"
    for number, (text, vector) in enumerate(zip(texts, vectors, strict=True), start=1):
        print(f"{number}  {vector_text(vector, args.dims)}  {text}")
    print_similarities(vectors, caption)
    if args.out is not None:
        write_vectors(args.out, vectors)
        print(f"\nwrote {tuple(vectors.shape)} vectors to {args.out}")


def vector_text(vector: Tensor, dims: int) -> str:
    """``[+0.1234, -0.5678, …]  norm 1.2345``: the first ``dims`` values of ``vector`` and its norm."""
    shown = min(dims, len(vector))
    head = ", ".join(f"{x:+.4f}" for x in vector[:shown].tolist())
    more = ", …" if shown < len(vector) else ""
    return f"[{head}{more}]  norm {float(vector.norm()):.4f}"


def print_similarities(vectors: Tensor, caption: str) -> None:
    """The matrix of cosine similarities of ``vectors`` (n, d), rows and columns numbered from 1."""
    import torch

    unit = torch.nn.functional.normalize(vectors, dim=-1)
    print(f"\ncosine similarity ({vectors.shape[1]} dimensions, {caption})")
    print("     " + "".join(f"{j:>8}" for j in range(1, len(vectors) + 1)))
    for i, row in enumerate((unit @ unit.T).tolist(), start=1):
        print(f"{i:>5}" + "".join(f"{x:8.4f}" for x in row))


def print_token_vectors(encoder: SentenceEncoder, texts: Sequence[str], dims: int) -> None:
    """Each text, then a line per token: its position, label and contextual vector."""
    from vaswani.inspect.attention import token_labels

    for number, text in enumerate(texts, start=1):
        ids, hidden = encoder.token_vectors(text)
        if number > 1:
            print()
        print(f"{number}  {text}")
        labels = token_labels(encoder.tokenizer.tokenizer, ids)
        width = max(len(label) for label in labels)
        for position, (label, vector) in enumerate(zip(labels, hidden, strict=True)):
            print(f"{position:>5}  {label:<{width}}  {vector_text(vector, dims)}")
