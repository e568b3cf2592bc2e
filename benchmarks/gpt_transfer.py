"""Does pretraining a GPT help? SST-2 from a GPT pretrained on its unlabeled sentences against the
same GPT from random initialisation, with one budget of training minutes for both.

Runs the documented commands through the command-line tool, in this order:

1. the SST-2 training sentences, without their labels, one a line, as one text file;
2. ``vaswani train lm --text sentences.txt SHAPE --batch-tokens 2048 --warmup 10 --max-minutes N
   --out OUT/lm``: GPT pretraining on that text (2 layers, d_model 128, context 64, a byte-level
   BPE of 1,024 pieces trained on it; the lm recipe's other settings: AdamW at 2e-3, dropout 0.2);
3. ``vaswani train classify --init OUT/lm --pool mean --lr 5e-4 --warmup 50 --max-minutes M --out
   OUT/pretrained``: a GPT classifier (on the mean of its states, with the auxiliary
   language-modelling loss at weight 0.5) fine-tuned from it;
4. ``vaswani train lm ... --max-steps 1 --lr 1e-12 --min-lr 0 --out OUT/random-lm``: the same
   shape and tokenizer at its random initialisation (one step at a learning rate of 1e-12 leaves the
   weights as they were drawn: the run directory is only the way to hand them to ``--init``);
5. ``vaswani train classify --init OUT/random-lm ... --max-minutes N+M --out OUT/random``: the
   same classifier from it, with the same settings, for the whole budget.

The classifier settings are the same for both: the classify recipe's from-scratch learning rate
(5e-4), 50 warmup steps (the recipe's 10% of 3 epochs would outlast a budget of minutes), and
the mean of the states, which did better than the last token in a 3-minute trial from the same
pretrained GPT (61.6% against 57.8%).

Every run uses one thread (``--threads 1``): on cores shared with many other jobs, two threads
that wait on each other at every operation lose more than they gain. Both classifiers train on the
whole SST-2 training set (67,349 sentences, ``../shared/data/sst2``)
and are scored on its dev set (872 sentences). The script writes a markdown table (dev accuracy
and macro-F1, steps, training minutes, the commands) to ``--results``. The issue's target: the
pretrained GPT ahead by at least 5 points.

    python benchmarks/gpt_transfer.py                             # N = 6, M = 3 (about 20 minutes)
    python benchmarks/gpt_transfer.py --lm-minutes 1 --classify-minutes 0.5 --results runs/smoke.md
    python benchmarks/gpt_transfer.py --out runs/gpt_transfer --report   # only rewrite the table
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

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "sst2"
RESULTS = ROOT / "benchmarks" / "results" / "gpt_transfer.md"
SHAPE = shlex.split("--d-model 128 --heads 4 --d-ff 512 --layers 2 --max-len 64 --vocab-size 1024")
LM_SETTINGS = shlex.split("--batch-tokens 2048 --warmup 10")  # many small steps: a budget of minutes
CLASSIFIER = shlex.split("--pool mean --lr 5e-4 --warmup 50")  # the same for both
RANDOM_INIT = shlex.split("--max-steps 1 --lr 1e-12 --min-lr 0")  # the weights stay as drawn


def shown(path: Path) -> str:
    """``path`` relative to the repository, whose root the commands run from."""
    return os.path.relpath(path.resolve(), ROOT)


def vaswani(*args: str) -> None:
    """Run ``vaswani ARGS`` with this interpreter's package."""
    subprocess.run([sys.executable, "-m", "vaswani.cli", *args], check=True)


def write_sentences(train: Path, out: Path) -> int:
    """The training sentences of ``train`` (SST-2's TSV) without their labels, one a line."""
    with open(train, encoding="utf-8") as f:
        sentences = [
            row["sentence"].strip() for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        ]
    out.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    return len(sentences)


def row(name: str, run: Path, lm: Path | None) -> str:
    """The table row of one classifier run (and of the lm run it started from, when trained)."""
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    lm_minutes, lm_steps, lm_loss = 0.0, "-", "-"
    if lm is not None:
        pre = json.loads((lm / "metrics.json").read_text(encoding="utf-8"))
        lm_minutes, lm_steps, lm_loss = (
            pre["train_seconds"] / 60,
            f"{pre['steps']:,}",
            f"{pre['valid_loss']:.3f}",
        )
    minutes = metrics["train_seconds"] / 60
    cells = [
        name,
        f"**{100 * metrics['valid_accuracy']:.1f}%**",
        f"{metrics['valid_macro_f1']:.3f}",
        lm_steps,
        lm_loss,
        f"{lm_minutes:.1f}",
        f"{metrics['steps']:,}",
        f"{minutes:.1f}",
        f"{lm_minutes + minutes:.1f}",
        f"{config['train']['lr']:g}",
    ]
    return "| " + " | ".join(cells) + " |"


def plan(out: Path, train: Path, dev: Path, n: float, m: float) -> list[list[str]]:
    """The ``vaswani`` arguments of the four runs, in order."""
    text = ["--text", str(out / "sentences.txt"), *SHAPE, "--threads", "1"]
    data = ["train", "classify", "--train", str(train), "--dev", str(dev), *CLASSIFIER, "--threads", "1"]
    pretrained = ["--init", str(out / "lm"), "--max-minutes", f"{m:g}"]
    random = ["--init", str(out / "random-lm"), "--max-minutes", f"{n + m:g}"]
    return [
        ["train", "lm", *text, *LM_SETTINGS, "--max-minutes", f"{n:g}", "--out", str(out / "lm")],
        [*data, *pretrained, "--out", str(out / "pretrained")],
        ["train", "lm", *text, *RANDOM_INIT, "--out", str(out / "random-lm")],
        [*data, *random, "--out", str(out / "random")],
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lm-minutes", type=float, default=6.0, help="pretraining minutes, N (6)")
    parser.add_argument("--classify-minutes", type=float, default=3.0, help="fine-tuning minutes, M (3)")
    parser.add_argument("--data", type=Path, default=DATA, help=f"the SST-2 folder (default {DATA})")
    parser.add_argument(
        "--out", type=Path, help="keep the run directories here (default: a temporary folder)"
    )
    parser.add_argument(
        "--results", type=Path, default=RESULTS, help=f"the table to write (default {RESULTS})"
    )
    parser.add_argument(
        "--report",
        action="store_true",
        help="train nothing: write the table from the runs of an earlier --out",
    )
    args = parser.parse_args(argv)
    train, dev = args.data / "train.tsv", args.data / "dev.tsv"
    if not (train.is_file() and dev.is_file()):
        print(f"skipped: no SST-2 train.tsv and dev.tsv in {args.data} (see --data)")
        return
    if args.report and args.out is None:
        parser.error("--report needs --out, the folder of the earlier runs")
    if args.out is not None and not args.report and args.out.exists() and any(args.out.iterdir()):
        parser.error(f"--out {args.out} exists and is not empty")
    n, m = args.lm_minutes, args.classify_minutes
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out or Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        runs = plan(out, train, dev, n, m)
        if not args.report:
            write_sentences(train, out / "sentences.txt")
            for command in runs:
                vaswani(*command)
        rows = [
            row(f"pretrained {n:g} min, fine-tuned {m:g} min", out / "pretrained", out / "lm"),
            row(f"random init, fine-tuned {n + m:g} min", out / "random", None),
        ]
        places = {str(out): shown(args.out) if args.out else "OUT", str(args.data): shown(args.data)}
        commands = []
        for command in runs:
            line = shlex.join(["vaswani", *command])
            for place, name in places.items():
                line = line.replace(place, name)
            commands.append(line)
    load = os.getloadavg()[0]
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    call = "python benchmarks/gpt_transfer.py"
    call += f" --lm-minutes {n:g}" if n != 6 else ""
    call += f" --classify-minutes {m:g}" if m != 3 else ""
    call += f" --out {shown(args.out)}" if args.out else ""
    written = f"`{call} --report` from the runs of `{call}`" if args.report else f"`{call}`"
    lines = [
        f"# SST-2 with a GPT: pretrained {n:g} minutes and fine-tuned {m:g}, against random init "
        f"fine-tuned {n + m:g}",
        "",
        "| GPT | dev accuracy | dev macro-F1 | lm steps | lm valid loss | lm minutes | classify steps "
        "| classify minutes | total minutes | classify lr |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        "Same shape for both (2 layers, d_model 128, 4 heads, d_ff 512, context 64, byte-level BPE of "
        "1,024 pieces trained on the unlabeled training sentences), the same classifier settings (mean "
        "pooling, auxiliary LM loss 0.5, lr 5e-4, batch 32). Whole SST-2 training set (67,349 sentences), "
        "dev set 872. "
        f"{os.cpu_count()} CPUs shared with other jobs (load average {load:.1f} at the end), "
        f"{platform.machine()}, python {platform.python_version()}, {now}. Written by {written}, which ran:",
        "",
        "```bash",
        "# OUT/sentences.txt: the sentence column of train.tsv, one a line (the labels left out)",
        *commands,
        "```",
    ]
    table = "\n".join(lines) + "\n"
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(table, encoding="utf-8")
    print(table)


if __name__ == "__main__":
    main()
