"""``vaswani train TASK``: one command for every task of the registry.

Its flags are generated from the config dataclasses (:mod:`vaswani.cli.flags`): the model's (those
of the archs the task trains: no ``--image-size`` for a translator), the training's and the task's
data config. Settings come from the task's packaged recipe (``--recipe NAME``: another one), then
``--preset``, then ``--config FILE``, then the flags (:mod:`vaswani.tasks.settings`). ``--resume
RUN_DIR`` continues a stopped run with its own settings; it takes only ``--max-steps``,
``--max-minutes`` and the settings of how it runs (``--device``, ``--compile``,
``--grad-checkpointing``, ``--fsdp``, ``--nproc``) and refuses any other setting rather than
ignoring it. ``--nproc N`` trains on N processes of this machine (:mod:`vaswani.cli.launch`);
under ``torchrun`` every process runs this command and only the main one prints.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path
from typing import Any

from vaswani import recipes
from vaswani.cli import launch
from vaswani.cli.flags import add_fields, flag_names, given
from vaswani.cli.outputs import check_new_run
from vaswani.config import ModelConfig, TrainConfig, presets
from vaswani.errors import ConfigError
from vaswani.rundir import RunDir
from vaswani.runtime import check_processes, check_threads
from vaswani.tasks import lifecycle, registry
from vaswani.training import distributed

RESUME_CHANGES = ("max_steps", "max_minutes", "device", "compile", "grad_checkpointing", "fsdp")
SECTIONS = ("model", "train", "data")


def add_parsers(commands: Any) -> None:
    train = commands.add_parser("train", help="train a model")
    tasks = train.add_subparsers(dest="task", required=True)
    for spec in registry.trainable():
        p = tasks.add_parser(
            spec.name,
            help=spec.summary,
            description=f"{spec.summary[0].upper()}{spec.summary[1:]}. Settings: the task's recipe "
            "(vaswani/recipes/), then --preset, then --config FILE, then these flags.",
        )
        run = p.add_argument_group("run")
        run.add_argument("--config", type=Path, help="YAML file with model:, train: and data: sections")
        run.add_argument("--out", type=Path, help="run directory to write (default: runs/NAME)")
        run.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue a stopped run")
        run.add_argument(
            "--recipe",
            metavar="NAME",
            help="start from this packaged recipe (vaswani/recipes/NAME.yaml) instead of the task's own, "
            "e.g. translation-deep-shallow",
        )
        run.add_argument("--preset", choices=sorted(presets()), help="model architecture preset")
        run.add_argument("--quiet", action="store_true", help="no progress bar")
        run.add_argument(
            "--nproc", type=int, metavar="N", help="train on N processes of this machine (DDP; --fsdp: FSDP2)"
        )
        add_fields(p.add_argument_group("model"), ModelConfig, skip=registry.model_fields_skipped(spec))
        training = p.add_argument_group("training")
        add_fields(training, TrainConfig)
        training.add_argument(
            "--bf16",
            action=argparse.BooleanOptionalAction,
            dest="train.bf16",
            default=None,
            help="the old spelling of --precision bf16 (--no-bf16: --precision fp32)",
        )
        add_fields(p.add_argument_group("data"), spec.data)
        p.set_defaults(handler=cmd_train, spec=spec)


def flags_of(args: argparse.Namespace, spec: registry.TaskSpec) -> dict[str, dict[str, Any]]:
    """What the flags set, by section (``--preset`` under model, as the recipe loader reads it)."""
    flags = {
        "model": given(args, ModelConfig), "train": given(args, TrainConfig), "data": given(args, spec.data)
    }  # fmt: skip
    if args.preset is not None:
        flags["model"]["preset"] = args.preset
    if getattr(args, "train.bf16") is not None:
        flags["train"]["bf16"] = getattr(args, "train.bf16")
    return flags


def resume_changes(
    args: argparse.Namespace, spec: registry.TaskSpec, flags: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """The training settings a resume may extend (``--max-steps``, ``--max-minutes``). Any other
    setting given with ``--resume`` is refused: a resumed run keeps the settings it was started
    with (its ``config.json``)."""
    others = [
        (s, n)
        for s, fields in flags.items()
        for n in fields
        if (s, n) not in (("train", c) for c in RESUME_CHANGES)
    ]
    if others or args.config is not None or args.recipe is not None:
        flag = spelling(args, spec, *others[0]) if others else "--config" if args.config else "--recipe"
        raise ConfigError(
            f"{flag}: a resumed run keeps its own settings; only --max-steps, --max-minutes and how it "
            "runs (--device, --compile, --grad-checkpointing, --fsdp, --nproc) may change"
        )
    return dict(flags["train"])


def spelling(args: argparse.Namespace, spec: registry.TaskSpec, section: str, name: str) -> str:
    """The flag the user typed for ``section.name`` (its first spelling when unknown)."""
    if name in ("preset", "bf16"):
        return f"--{name}"
    cls = {"model": ModelConfig, "train": TrainConfig, "data": spec.data}[section]
    names = next(flag_names(f) for f in cls.__dataclass_fields__.values() if f.name == name)  # type: ignore[attr-defined]
    typed = [n for n in names if n in args.argv_flags]
    return typed[0] if typed else names[-1]


def named_flag(
    exc: ConfigError, args: argparse.Namespace, spec: registry.TaskSpec, flags: dict[str, dict[str, Any]]
) -> ConfigError:
    """``exc``, led by the flag that set the field it names when a flag set it."""
    found = re.search(r"config field '(model|train|data)\.(\w+)'", str(exc))
    if found and found.group(2) in flags.get(found.group(1), {}):
        return ConfigError(f"{spelling(args, spec, found.group(1), found.group(2))}: {exc}")
    return exc


def cmd_train(args: argparse.Namespace) -> int:
    spec: registry.TaskSpec = args.spec  # the entry whose parser read the flags
    assert spec.train is not None
    started = time.perf_counter()
    flags = flags_of(args, spec)
    if args.nproc is not None:
        check_processes(args.nproc)
    if args.resume:
        changes = resume_changes(args, spec, flags)
        if launch.wanted(args.nproc):
            RunDir(args.resume).read_config(spec.name)  # a bad run directory: one line, before launching
            return launch.launch(args.argv, args.nproc)
        with lifecycle.resumed_run(args.resume, spec.name, **changes) as (_, resumed, device):
            result = spec.train(resumed, Path(args.resume), resume=True, quiet=args.quiet, device=device)
            finish(spec, result, Path(args.resume), started, args.quiet)
        return 0
    check_new_run(args.out)
    if args.recipe is not None:
        try:
            recipes.packaged(args.recipe)  # an unknown name: the loader's line, naming those there are
        except ConfigError as exc:
            raise ConfigError(f"--recipe: {exc}") from None
    try:
        run = registry.configure(spec.name, flags, config=args.config, recipe=args.recipe)
        check_threads(run.train.threads)
    except ConfigError as exc:
        raise named_flag(exc, args, spec, flags) from None
    if run.train.fsdp and not launch.wanted(args.nproc) and not distributed.world().many:
        raise ConfigError("--fsdp shards a model across processes: start several (--nproc N or torchrun)")
    if launch.wanted(args.nproc):
        RunDir.new(args.out, spec.name)  # an existing run: one line, before launching
        return launch.launch(args.argv, args.nproc)
    try:
        with lifecycle.new_run(args.out, spec.name, run.train.device) as (run_dir, device):
            result = spec.train(run, run_dir, resume=False, quiet=args.quiet, device=device)
            finish(spec, result, run_dir, started, args.quiet)
    except ConfigError as exc:  # a field found too large once the data is known (the images' memory)
        raise named_flag(exc, args, spec, flags) from None
    return 0


def finish(spec: registry.TaskSpec, result: Any, run_dir: Path, started: float, quiet: bool) -> None:
    """Print the task's report of a trained run (in the main process)."""
    assert spec.finish is not None
    if distributed.world().main:
        for line in spec.finish(result, run_dir, started, quiet):
            print(line)
