"""``vaswani average``: checkpoint averaging, θ̄ = (1/N) Σ θ_i over the last N checkpoints."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vaswani.cli.common import add_run_command
from vaswani.cli.outputs import add_force_flag, check_output
from vaswani.errors import ConfigError, RunDirError
from vaswani.rundir import RunDir


def add_parser(commands: Any) -> None:
    p = add_run_command(
        commands,
        "average",
        help="average the weights of a run's last N checkpoints",
        description="Average the weights of the last N checkpoints in RUN_DIR/checkpoints (the paper "
        "averages the last 5, or 20 for its big models; keep that many with --keep-checkpoints when "
        "training). Damaged checkpoints (sha256) are refused. By default the average replaces "
        "RUN_DIR/model.safetensors, which translate, generate and evaluate then use (over a best file of "
        "train.select_by too); the weights it "
        "replaces are kept in RUN_DIR/model.before-average.safetensors (written once, by the first "
        "averaging). With --out the average goes to that file instead (an existing one only with "
        "--force; never a checkpoint's or the run's own files). Files are written atomically. A run "
        "that another process trains, resumes or averages is refused in one line naming it.",
    )
    p.add_argument("--last", type=int, required=True, metavar="N", help="how many checkpoints to average")
    p.add_argument("--out", type=Path, metavar="FILE", help="write the averaged weights here instead")
    add_force_flag(p)
    p.set_defaults(handler=cmd_average)


def cmd_average(args: argparse.Namespace) -> None:
    from vaswani.tasks import registry
    from vaswani.training.averaging import newest_checkpoints, write_average
    from vaswani.training.checkpoint import list_checkpoints

    if args.last < 1:
        raise ConfigError(f"--last must be >= 1, got {args.last}")
    check_output(args.out, "--out", own_run=args.run_dir, force=args.force)
    registry.spec_of(args.run_dir)
    chosen = newest_checkpoints(args.run_dir, args.last)  # before the lock: a refusal changes nothing
    with RunDir(args.run_dir).lock():  # not while the run trains, resumes or is averaged elsewhere
        if list_checkpoints(args.run_dir)[-args.last :] != chosen:
            raise RunDirError(f"{args.run_dir}: its checkpoints changed meanwhile; average again")
        done = write_average(args.run_dir, chosen, args.out)
    names = ", ".join(path.name for path in done.checkpoints)
    print(f"averaged {len(done.checkpoints)} checkpoints ({names}) → {done.out}")
    if done.backup is not None:
        print(f"the weights from before averaging are in {done.backup}")
