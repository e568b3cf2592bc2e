"""Training throughput on one process against several (DistributedDataParallel over gloo on the
CPU, NCCL on GPUs), through the command users run: ``vaswani train TASK --nproc N``.

Each configuration trains the task's embedded default job for ``--steps`` steps into a fresh run
directory and reports the tokens/s of its ``metrics.json`` (training steps only: evaluation and
start-up are not counted); the runs alternate, one process then N, for ``--rounds`` rounds.
Both train the same global batches, so the figures are the same work. On a machine with as many
cores as processes little gain is expected: each process gets cores/N threads and the gradients
are summed over a socket.

    python benchmarks/processes.py                      # lm, 1 against 2 processes, 60 steps
    python benchmarks/processes.py --task translation --nproc 2 --steps 100
    python benchmarks/processes.py --quick              # a smoke run: a tiny lm, 3 steps, one round
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import quick
import torch
from timing import available_cores, cpu_description

ROOT = Path(__file__).resolve().parent.parent


def tokens_per_second(task: str, nproc: int, steps: int, folder: Path, extra: list[str]) -> float:
    out = folder / f"{task}-{nproc}-{len(list(folder.iterdir()))}"
    command = [
        sys.executable, "-m", "vaswani", "train", task, "--out", str(out), "--max-steps", str(steps),
        "--eval-every", str(10 * steps), "--quiet", "--nproc", str(nproc), *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return float(json.loads((out / "metrics.json").read_text(encoding="utf-8"))["tokens_per_second"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--task", default="lm", help="a task with an embedded default job (lm, translation, mlm)"
    )
    parser.add_argument("--nproc", type=int, default=2, help="processes against one (2)")
    parser.add_argument("--steps", type=int, default=60, help="training steps a run (60)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each configuration, alternating (2)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: a tiny lm, 3 steps, one round")
    args, extra = parser.parse_known_args(argv)
    rates: dict[int, list[float]] = {1: [], args.nproc: []}
    with tempfile.TemporaryDirectory() as tmp:
        if args.quick:  # the tiny lm of benchmarks/quick.py, for 3 steps, once
            args.task, args.steps, args.rounds = "lm", 3, 1
            text = quick.parallel_corpus(Path(tmp))[1]
            extra += ["--text", str(text), "--batch-tokens", "256", *quick.TINY_MODEL]
        for _ in range(args.rounds):
            for n in rates:
                rates[n].append(tokens_per_second(args.task, n, args.steps, Path(tmp), extra))
    one, many = statistics.median(rates[1]), statistics.median(rates[args.nproc])
    print(f"| processes | tokens/s (median of {args.rounds}) | runs |")
    print("|---:|---:|---|")
    for n, values in rates.items():
        print(f"| {n} | {statistics.median(values):,.0f} | {', '.join(f'{v:,.0f}' for v in values)} |")
    settings = f"{args.task}, {args.steps} steps {' '.join(extra)}".strip()
    print(f"\n{args.nproc} processes / 1: **{many / one:.2f}×** ({settings})")
    print(f"\n{cpu_description()}; {available_cores()} cores; torch {torch.__version__}")


if __name__ == "__main__":
    main()
