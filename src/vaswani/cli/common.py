"""What the ``vaswani`` commands that read texts or run a model share: standard input, and the
``--device`` flag of every command that decodes or evaluates."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from vaswani.data.readers import text_lines
from vaswani.io import read_stream_bounded


def add_run_command(commands: Any, name: str, help: str, description: str) -> argparse.ArgumentParser:
    """The parser of the subcommand ``name`` of ``commands`` that uses a trained run: ``RUN_DIR`` is
    its first argument."""
    p = commands.add_parser(name, help=help, description=description)
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    return p


def add_device_flag(p: argparse.ArgumentParser) -> None:
    """``--device``: where the run's model is loaded and runs (its weights are read on the CPU,
    then moved; a device this machine lacks is refused in one line by
    :func:`vaswani.runtime.resolve_device`)."""
    p.add_argument(
        "--device",
        default="auto",
        help="where the model runs: auto (CUDA, else MPS, else the CPU; default), cpu, cuda, cuda:N or mps",
    )


def read_stdin() -> list[str]:
    """The lines of standard input, read as every text file is (:func:`vaswani.data.readers.text_lines`:
    UTF-8, no NUL byte, lines within the limit; a byte-order mark at its start is dropped), refused
    past the input limit (``VASWANI_MAX_INPUT_BYTES``); empty lines are left to the command."""
    return text_lines(read_stream_bounded(sys.stdin.buffer, "<stdin>"), "<stdin>", allow_empty_lines=True)


def add_weights_flags(p: argparse.ArgumentParser) -> None:
    """``--quantize int8`` and ``--dtype fp32|bf16``: the weights a loaded model runs inference with
    (:func:`vaswani.layers.quantize.prepare_weights`; the run directory is not changed)."""
    p.add_argument(
        "--quantize",
        choices=("int8",),
        help="int8: int8 weights (per output channel, symmetric) in every linear layer, "
        "embeddings kept; on the CPU the activations are quantized row by row and the products "
        "summed in int32; inference only",
    )
    p.add_argument(
        "--dtype",
        choices=("fp32", "bf16"),
        help="the floating-point type the weights are cast to for inference (default: as saved, fp32)",
    )
