"""What every ``vaswani`` command shares: the model, training and run flags, config files
(defaults < ``--config`` YAML < flags), run directories and standard input."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from vaswani.config import (
    ACTIVATIONS,
    COMBINED_NORMS,
    NORM_PLACEMENTS,
    NORMS,
    POSITIONS,
    PRESETS,
    SCHEDULES,
    TIES,
    DataConfig,
    ModelConfig,
    RunConfig,
    TrainConfig,
    split_combined_norm,
)
from vaswani.data.readers import read_lines
from vaswani.errors import ConfigError, DataError, RunDirError

# Flag name → config field. Flags left unset keep the config file's value.
MODEL_FLAGS = {
    "d_model": "d_model", "heads": "n_heads", "d_ff": "d_ff", "encoder_layers": "n_encoder_layers",
    "decoder_layers": "n_decoder_layers", "dropout": "dropout", "norm": "norm",
    "norm_placement": "norm_placement", "position": "position", "attn_window": "attn_window",
    "rel_clip": "rel_clip", "max_len": "max_len", "activation": "activation", "tie": "tie_embeddings",
}  # fmt: skip
TRAIN_FLAGS = {
    "max_steps": "max_steps", "max_minutes": "max_minutes", "batch_tokens": "batch_tokens",
    "lr": "lr", "warmup": "warmup_steps", "schedule": "schedule", "accumulate": "accumulate",
    "label_smoothing": "label_smoothing", "clip_norm": "clip_norm", "eval_every": "eval_every",
    "checkpoint_every": "checkpoint_every", "seed": "seed", "bf16": "bf16", "threads": "threads",
    "deterministic": "deterministic", "weight_decay": "weight_decay", "min_lr": "min_lr",
    "keep_checkpoints": "keep_checkpoints",
}  # fmt: skip
RESUME_CHANGES = ("max_steps", "max_minutes")
NOT_SETTINGS = ("command", "task", "handler", "debug", "resume", "quiet")


def add_run_flags(p: argparse.ArgumentParser) -> None:
    run = p.add_argument_group("run")
    run.add_argument("--config", type=Path, help="YAML file with model:, train: and data: sections")
    run.add_argument("--out", type=Path, help="run directory to write (default: runs/NAME)")
    run.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue a stopped run")
    run.add_argument("--preset", choices=sorted(PRESETS), help="model architecture preset")
    run.add_argument("--quiet", action="store_true", help="no progress bar")


def add_model_flags(p: argparse.ArgumentParser, layers_help: str) -> argparse._ArgumentGroup:
    model = p.add_argument_group("model")
    model.add_argument("--d-model", type=int)
    model.add_argument("--heads", type=int)
    model.add_argument("--d-ff", type=int)
    model.add_argument("--layers", type=int, help=layers_help)
    model.add_argument("--dropout", type=float)
    model.add_argument(
        "--norm",
        choices=(*NORMS, *COMBINED_NORMS),
        help="the norm's kind (post_ln, pre_ln, pre_rmsnorm: also its place)",
    )
    model.add_argument(
        "--norm-placement",
        choices=NORM_PLACEMENTS,
        help="post: after each residual sum; pre: before each sublayer",
    )
    model.add_argument("--position", choices=POSITIONS)
    model.add_argument("--attn-window", type=int, help="local attention: keys within N positions")
    model.add_argument("--rel-clip", type=int, help="clipping distance k of relative positions")
    model.add_argument("--max-len", type=int, help="longest sequence (a language model's context)")
    model.add_argument("--activation", choices=ACTIVATIONS)
    model.add_argument("--tie", choices=TIES, help="embedding tying")
    return model


def add_train_flags(p: argparse.ArgumentParser) -> None:
    train = p.add_argument_group("training")
    train.add_argument("--max-steps", type=int)
    train.add_argument("--max-minutes", type=float)
    train.add_argument("--batch-tokens", type=int)
    train.add_argument("--lr", type=float, help="peak learning rate")
    train.add_argument("--min-lr", type=float, help="where the cosine schedule ends")
    train.add_argument("--warmup", type=int, help="warmup steps")
    train.add_argument("--schedule", choices=SCHEDULES)
    train.add_argument("--weight-decay", type=float, help="AdamW decay of the matrices")
    train.add_argument("--accumulate", type=int, help="batches per optimizer step")
    train.add_argument("--label-smoothing", type=float)
    train.add_argument("--clip-norm", type=float)
    train.add_argument("--eval-every", type=int)
    train.add_argument("--checkpoint-every", type=int, metavar="STEPS", help="a checkpoint every STEPS steps")
    train.add_argument(
        "--keep-checkpoints",
        type=int,
        metavar="N",
        help="keep the newest N checkpoints (5 or 20 to average them with vaswani average)",
    )
    train.add_argument("--seed", type=int)
    train.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None, help="bf16 autocast")
    train.add_argument("--threads", type=int)
    train.add_argument(
        "--deterministic",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="deterministic algorithms on one thread: the same weights on every rerun or resume (CPU)",
    )


def read_config_file(path: Path) -> dict[str, dict[str, Any]]:
    """The sections of a YAML config file, refusing unknown sections with the file named."""
    text = "\n".join(read_lines(path, allow_empty_lines=True))
    try:
        loaded = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: expected sections model:, train: and data:")
    for section, value in loaded.items():
        if section not in ("model", "train", "data"):
            raise ConfigError(f"{path}: unknown config section '{section}'")
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: section '{section}' must be a mapping")
    return loaded


def merge_settings(
    args: argparse.Namespace, model: dict[str, Any], train: dict[str, Any], data: dict[str, Any]
) -> str:
    """Apply ``--preset``, then ``--config``, then the flags to the defaults (in place); return
    the name of the source for error messages."""
    if args.preset:
        model.update(PRESETS[args.preset])
    if args.config:
        sections = read_config_file(args.config)
        model.update(split_combined_norm(sections.get("model", {})))
        train.update(sections.get("train", {}))
        data.update(sections.get("data", {}))
    flags = {
        name: getattr(args, flag)
        for flag, name in MODEL_FLAGS.items()
        if getattr(args, flag, None) is not None
    }
    model.update(split_combined_norm(flags))  # each source split first: a later old value sets both
    for flag, name in TRAIN_FLAGS.items():
        if getattr(args, flag, None) is not None:
            train[name] = getattr(args, flag)
    return str(args.config) if args.config else "flags"


def text_run_config(
    args: argparse.Namespace,
    task: str,
    arch: str,
    settings: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
    data_flags: tuple[str, ...],
) -> RunConfig:
    """The run config of a model trained on plain text (``lm``, ``mlm``): the task's default
    ``settings`` (model, train, data) < ``--config`` < flags. ``--text`` replaces the embedded
    default text, and with it or a config file the default job's time budget is dropped; the
    ``data_flags`` given are copied into the data section."""
    model, train, data = settings
    if args.text or args.config:  # the time budget is the embedded default job's, not a recipe's
        train["max_minutes"] = None
    if args.text:
        data["source"] = "text"
        data["text"] = [str(Path(t).resolve()) for t in args.text]
    source = merge_settings(args, model, train, data)
    model["arch"] = arch
    if args.layers is not None:
        model["n_decoder_layers" if arch == "decoder_only" else "n_encoder_layers"] = args.layers
    for flag in data_flags:
        if getattr(args, flag) is not None:
            data[flag] = getattr(args, flag)
    return RunConfig(
        task,
        ModelConfig.from_dict(model, source=source),
        TrainConfig.from_dict(train, source=source),
        DataConfig.from_dict(data, source=source),
    )


def resume_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The training settings a resume may extend (``--max-steps``, ``--max-minutes``). Any other
    setting given with ``--resume`` is refused: a resumed run keeps the settings it was started
    with (its ``config.json``)."""
    for name, value in vars(args).items():
        if name not in (*NOT_SETTINGS, *RESUME_CHANGES) and value is not None:
            raise ConfigError(
                f"--{name.replace('_', '-')}: a resumed run keeps its own settings; "
                "only --max-steps and --max-minutes may change"
            )
    return {TRAIN_FLAGS[f]: getattr(args, f) for f in RESUME_CHANGES if getattr(args, f) is not None}


def new_run_dir(out: Path | None, name: str) -> Path:
    """A run directory that is new or empty: an existing run is never overwritten."""
    if out is None:
        out = Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise RunDirError(f"{out}: already exists and is not empty; choose another --out")
    return out


def read_stdin() -> list[str]:
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        number = data[: exc.start].count(b"\n") + 1
        raise DataError(f"<stdin>:{number}: not valid UTF-8") from None
