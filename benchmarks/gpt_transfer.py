"""Does pretraining a GPT help? SST-2 from a GPT pretrained on its unlabeled sentences against the
same GPT from random initialisation, with one budget of training minutes for both, for several
numbers of labeled training sentences.

Runs the documented commands through the command-line tool:

1. the SST-2 training sentences, without their labels, one a line, as one text file, and, for each
   ``--labels`` K, the first K rows of one seeded shuffle of the labeled training set (nested:
   every smaller set is part of the larger ones; ``all`` is the whole set);
2. ``vaswani train lm --text sentences.txt SHAPE --batch-tokens 2048 --warmup 10 --max-steps
   1000000 --max-minutes N --out OUT/lm``: GPT pretraining on all the unlabeled sentences, once, for
   N minutes (the step limit is out of reach: the recipe's 3,000 steps take 3.5 minutes on a quiet
   core), 2 layers, d_model 128, context 64, a byte-level BPE of ``--vocab-size`` pieces (8,000,
   the classify recipe's vocabulary size: most words are one piece) trained on them, the lm
   recipe's other settings (AdamW at 2e-3, dropout 0.2);
3. for each K, ``vaswani train classify --train train-K.tsv --init OUT/lm --pool mean --lr 5e-4
   --warmup 50 --epochs 1000 --max-minutes M --out OUT/pretrained-K``: a GPT classifier (on the
   mean of its states, with the auxiliary language-modelling loss at weight 0.5) fine-tuned from
   it, for M minutes (the epoch limit is out of reach);
4. ``vaswani train lm ... --max-steps 1 --lr 1e-12 --min-lr 0 --out OUT/random-lm``: the same
   shape and tokenizer at its random initialisation (one step at a learning rate of 1e-12 leaves the
   weights as they were drawn: the run directory is only the way to hand them to ``--init``);
5. for each K, ``vaswani train classify --train train-K.tsv --init OUT/random-lm ... --max-minutes
   N+M --out OUT/random-K``: the same classifier from it, with the same settings, for the whole
   budget (the pretraining minutes included).

This is the setting of semi-supervised sequence learning (Dai and Le 2015): the text is plentiful
and the labels are not. With all 67,349 labels the random GPT, which also learns the language
model as it goes (the auxiliary loss), sees three times as many labeled examples in its N + M
minutes as the pretrained one in its M; with fewer labels both see every label many times over,
and what the pretraining learned is what is left to tell them apart.

The classifier settings are the same for both: the classify recipe's from-scratch learning rate
(5e-4), 50 warmup steps (the recipe's 10% of 3 epochs would outlast a budget of minutes), and
the mean of the states, which did better than the last token in a 3-minute trial from the same
pretrained GPT (61.6% against 57.8%). Every score is the final weights' on the SST-2 dev set (872
sentences).

Every run uses one thread (``--threads 1``), and ``--jobs`` runs (2) train at once, each with its
output in ``OUT/NAME.log``: on two cores shared with other jobs, two threads of one run that wait
on each other at every operation lose more than they gain. The script writes a markdown table
(dev accuracy and macro-F1 of the final weights, the best evaluation, steps, minutes, the
commands) to ``--results``. The issue's target: the pretrained GPT ahead by at least 5 points.

    python benchmarks/gpt_transfer.py                     # N = 6, M = 3, K = 1000, 5000, all: ~25 min
    python benchmarks/gpt_transfer.py --lm-minutes 1 --classify-minutes 0.5 --labels 500 \
        --results runs/smoke.md
    python benchmarks/gpt_transfer.py --out runs/gpt_transfer --report   # only rewrite the table
    python benchmarks/gpt_transfer.py --quick     # a smoke run: 256 sentences, seconds a run, no table
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import random
import shlex
import tempfile
from pathlib import Path

from jobs import ROOT, Job, run_all, shown, write_table

DATA = ROOT.parent / "shared" / "data" / "sst2"
RESULTS = ROOT / "benchmarks" / "results" / "gpt_transfer.md"
SHAPE = shlex.split("--d-model 128 --heads 4 --d-ff 512 --layers 2 --max-len 64")
LM_SETTINGS = shlex.split("--batch-tokens 2048 --warmup 10 --max-steps 1000000")  # the minutes end it
CLASSIFIER = shlex.split("--pool mean --lr 5e-4 --warmup 50 --epochs 1000")  # for both; minutes end it
RANDOM_INIT = shlex.split("--max-steps 1 --lr 1e-12 --min-lr 0")  # the weights stay as drawn
SEED = 0  # of the shuffle the labeled subsets are cut from


def read_rows(train: Path) -> tuple[list[str], list[dict[str, str]]]:
    """The header and rows of SST-2's TSV ``train``."""
    with open(train, encoding="utf-8") as f:
        reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        return list(reader.fieldnames or []), list(reader)


def write_inputs(train: Path, out: Path, labels: list[str]) -> None:
    """``out/sentences.txt`` (the training sentences without their labels, one a line) and, for
    each K of ``labels``, ``out/train-K.tsv``: the first K rows of one seeded shuffle."""
    header, rows = read_rows(train)
    (out / "sentences.txt").write_text("".join(r["sentence"].strip() + "\n" for r in rows), encoding="utf-8")
    shuffled = rows[:]
    random.Random(SEED).shuffle(shuffled)
    for k in labels:
        chosen = shuffled if k == "all" else shuffled[: int(k)]
        lines = ["\t".join(header)] + ["\t".join(r[h] for h in header) for r in chosen]
        (out / f"train-{k}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def plan(out: Path, dev: Path, n: float, m: float, labels: list[str], vocab: int) -> list[Job]:
    """The runs, in the order they are started once what they need has finished."""
    text = ["--text", str(out / "sentences.txt"), *SHAPE, "--vocab-size", str(vocab), "--threads", "1"]

    def classify(name: str, k: str, init: str, minutes: float, after: str) -> Job:
        data = ["--train", str(out / f"train-{k}.tsv"), "--dev", str(dev), *CLASSIFIER, "--threads", "1"]
        run = ["--init", str(out / init), "--max-minutes", f"{minutes:g}"]
        args = ["train", "classify", *data, *run, "--out", str(out / f"{name}-{k}")]
        return Job(f"{name}-{k}", args, [after])

    jobs = [
        Job("random-lm", ["train", "lm", *text, *RANDOM_INIT, "--out", str(out / "random-lm")]),
        Job("lm", ["train", "lm", *text, *LM_SETTINGS, "--max-minutes", f"{n:g}", "--out", str(out / "lm")]),
    ]
    jobs += [classify("random", k, "random-lm", n + m, "random-lm") for k in labels]
    jobs += [classify("pretrained", k, "lm", m, "lm") for k in labels]
    return jobs


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def best(run: Path) -> str:
    """A classifier run's best dev accuracy over its evaluations (``train_log.csv``) and its step."""
    with open(run / "train_log.csv", encoding="utf-8") as f:
        scored = [r for r in csv.DictReader(f) if r.get("valid_accuracy")]
    top = max(scored, key=lambda r: float(r["valid_accuracy"]))
    return f"{100 * float(top['valid_accuracy']):.1f}% (step {int(top['step']):,})"


def accuracy(run: Path) -> str:
    """A classifier run's dev accuracy and macro-F1 (the final weights), its best evaluation, and
    its steps and minutes."""
    metrics = read_json(run / "metrics.json")
    return (
        f"**{100 * metrics['valid_accuracy']:.1f}%** | {metrics['valid_macro_f1']:.3f} | {best(run)} | "
        f"{metrics['steps']:,} | {metrics['train_seconds'] / 60:.1f}"
    )


def row(out: Path, k: str) -> str:
    """The table row of the K labels: the pretrained and the random classifier side by side."""
    ahead = 100 * (
        read_json(out / f"pretrained-{k}" / "metrics.json")["valid_accuracy"]
        - read_json(out / f"random-{k}" / "metrics.json")["valid_accuracy"]
    )
    size = f"{len(read_rows(out / f'train-{k}.tsv')[1]):,}"
    sides = f"{accuracy(out / f'pretrained-{k}')} | {accuracy(out / f'random-{k}')}"
    return f"| {size} | {sides} | {ahead:+.1f} |"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lm-minutes", type=float, default=6.0, help="pretraining minutes, N (6)")
    parser.add_argument("--classify-minutes", type=float, default=3.0, help="fine-tuning minutes, M (3)")
    parser.add_argument(
        "--labels",
        default="1000,5000,all",
        help="labeled training sentences, K, comma-separated (1000,5000,all)",
    )
    parser.add_argument("--vocab-size", type=int, default=8000, help="BPE pieces (8000)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once, one thread each (2)")
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
    parser.add_argument("--quick", action="store_true", help="a smoke run: 256 sentences, 2 s a run")
    args = parser.parse_args(argv)
    args.data = args.data.resolve()
    train, dev = args.data / "train.tsv", args.data / "dev.tsv"
    if not (train.is_file() and dev.is_file()):
        print(f"skipped: no SST-2 train.tsv and dev.tsv in {args.data} (see --data)")
        return
    quick = tempfile.TemporaryDirectory()
    if args.quick:  # the header and the first rows of each file; the table in the scratch folder
        for split, rows in (("train", 256), ("dev", 64)):
            lines = (args.data / f"{split}.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
            Path(quick.name, f"{split}.tsv").write_text("".join(lines[: rows + 1]), encoding="utf-8")
        train, dev = Path(quick.name, "train.tsv"), Path(quick.name, "dev.tsv")
        args.lm_minutes, args.classify_minutes, args.labels, args.vocab_size = 0.03, 0.03, "64", 300
        args.results, args.out = Path(quick.name, "gpt_transfer.md"), Path(quick.name, "runs")
    labels = [k.strip() for k in args.labels.split(",")]
    if any(k != "all" and not (k.isdigit() and int(k) > 0) for k in labels):
        parser.error(f"--labels {args.labels}: each is a positive number of sentences or 'all'")
    if args.report and args.out is None:
        parser.error("--report needs --out, the folder of the earlier runs")
    if args.out is not None and not args.report and args.out.exists() and any(args.out.iterdir()):
        parser.error(f"--out {args.out} exists and is not empty")
    n, m = args.lm_minutes, args.classify_minutes
    with tempfile.TemporaryDirectory() as scratch:
        out = (args.out or Path(scratch)).resolve()
        out.mkdir(parents=True, exist_ok=True)
        jobs = plan(out, dev, n, m, labels, args.vocab_size)
        if not args.report:
            write_inputs(train, out, labels)
            run_all(jobs, out, args.jobs)
        rows = [row(out, k) for k in labels]
        lm = read_json(out / "lm" / "metrics.json")
        places = {str(out): shown(args.out) if args.out else "OUT", str(args.data): shown(args.data)}
        commands = []
        for job in jobs:
            line = shlex.join(job.command())
            for place, name in places.items():
                line = line.replace(place, name)
            commands.append(line)
    load = os.getloadavg()[0]
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    call = "python benchmarks/gpt_transfer.py"
    call += f" --lm-minutes {n:g}" if n != 6 else ""
    call += f" --classify-minutes {m:g}" if m != 3 else ""
    call += f" --labels {args.labels}" if args.labels != "1000,5000,all" else ""
    call += f" --vocab-size {args.vocab_size}" if args.vocab_size != 8000 else ""
    call += f" --out {shown(args.out)}" if args.out else ""
    written = f"`{call} --report` from the runs of `{call}`" if args.report else f"`{call}`"
    lines = [
        f"# SST-2 with a GPT: pretrained {n:g} minutes and fine-tuned {m:g}, against random init "
        f"fine-tuned {n + m:g}",
        "",
        f"The pretraining: {lm['steps']:,} steps, {lm['train_seconds'] / 60:.1f} minutes, lm valid loss "
        f"{lm['valid_loss']:.3f} (nats per token), on all the training sentences without their labels.",
        "",
        "| labeled sentences | pretrained: dev accuracy | macro-F1 | best evaluation | steps | minutes "
        "| random init: dev accuracy | macro-F1 | best evaluation | steps | minutes "
        "| pretrained ahead (points) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        "Same shape for both (2 layers, d_model 128, 4 heads, d_ff 512, context 64, byte-level BPE of "
        f"{args.vocab_size:,} pieces trained on the unlabeled training sentences), the same classifier "
        "settings (mean pooling, auxiliary LM loss 0.5, lr 5e-4, 50 warmup steps, batch 32), one thread "
        f"each, {args.jobs} runs at a time. The labeled sentences: the first K of one shuffle "
        f"(seed {SEED}) of the SST-2 training set (67,349); dev set 872, scored with the final weights. "
        f"{os.cpu_count()} CPUs (load average {load:.1f} at the end), {platform.machine()}, "
        f"python {platform.python_version()}, {now}. Written by {written}, which ran:",
        "",
        "```bash",
        "# OUT/sentences.txt: the sentence column of train.tsv, one a line (the labels left out);",
        f"# OUT/train-K.tsv: the first K rows of train.tsv shuffled with seed {SEED}",
        *commands,
        "```",
    ]
    write_table(args.results, lines)


if __name__ == "__main__":
    main()
