"""Every side-by-side benchmark, each in its own process, into one performance table.

    python benchmarks/run_all.py            # the whole set: over an hour on 2 quiet cores
    python benchmarks/run_all.py --quick    # every benchmark's smoke run: minutes
    python benchmarks/run_all.py --only gpt,bert --threads 2

Each job runs ``python benchmarks/SCRIPT.py ...`` in a fresh process (fp32 and bf16 apart where the
script can split them), with ``$VASWANI_BENCH_RESULTS`` naming a file to which the script appends its
side-by-side results (``timing.record``: the paired measurements of ours and of the other side, and
the target the script states). The script's own output streams through. Then
``benchmarks/results/performance.md`` gets one section for this machine (the CPU model and the flags
that decide its kernels, or the GPU; torch and transformers versions; threads; date): every result
with its ratio, the spread of the paired ratios, the target and whether it is met, and each job's
wall time, peak resident memory (the child's ``ru_maxrss``, from ``os.wait4``) and exit status.
Sections of other machines already in the file are kept, so that the file holds one section per
kind of machine it was run on; with ``--only``, so are the rows of this machine's section of the jobs
not run.

The ratio is ours / other for a rate, other / ours for a size ("lower is better" in its name): above
1 is ours ahead either way. A target reads ">= X" (that ratio) or "ours >= X%" (ours itself, an MFU).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from timing import RESULTS_ENV, available_cores, cpu_description

HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "results" / "performance.md"
TITLE = "# Performance: vaswani against its peers, side by side"


@dataclass(frozen=True)
class Job:
    """One benchmark process: ``script`` with ``args`` (and ``quick`` under ``--quick``)."""

    name: str
    script: str
    args: tuple[str, ...] = ()
    quick: tuple[str, ...] = ("--quick",)
    device: bool = False  # the script takes --device (others run on the CPU only)
    threads: int | None = None  # its own torch threads, whatever --threads says


JOBS = (
    Job("translation fp32", "translation_speed.py", ("--fp32",)),
    Job("translation bf16", "translation_speed.py", ("--bf16",)),
    Job("beam search vs Marian", "marian_speed.py", ("--bf16",)),
    Job("translation vs CTranslate2", "ct2_speed.py", ("--compile",)),
    Job("gpt", "gpt_speed.py", device=True),
    Job("compiled generation", "compiled_generation.py", ("--profile",), device=True),
    Job("memory roofline", "roofline.py"),
    Job("bert", "bert_speed.py"),
    Job("vit fp32", "vit_speed.py", ("--fp32",), device=True),
    Job("vit bf16", "vit_speed.py", ("--bf16",), device=True),
    Job("local attention", "long_context.py"),
    Job("windowed generation", "window_generation.py", device=True),
    Job("server vs direct", "serve_load.py", threads=1),  # a server and its clients: one thread each
)


@dataclass
class Outcome:
    job: Job
    status: int
    seconds: float
    peak_mib: float
    results: list[dict[str, object]]


def run_job(job: Job, quick: bool, threads: int, device: str) -> Outcome:
    """Run ``job`` in its own process; its results, exit status, wall time and peak memory."""
    command = [sys.executable, str(HERE / job.script), *job.args, "--threads", str(job.threads or threads)]
    command += list(job.quick) if quick else []
    command += ["--device", device] if job.device and device != "cpu" else []
    with tempfile.TemporaryDirectory() as tmp:
        results_file = Path(tmp) / "results.jsonl"
        env = {**os.environ, RESULTS_ENV: str(results_file)}
        print(f"\n=== {job.name}: {' '.join(command[1:])}", flush=True)
        started = time.perf_counter()
        child = subprocess.Popen(command, env=env, cwd=HERE.parent)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - started
        lines = results_file.read_text(encoding="utf-8").splitlines() if results_file.exists() else []
    return Outcome(job, child.returncode, seconds, usage.ru_maxrss / 1024, [json.loads(x) for x in lines])


def ratios(result: dict[str, object]) -> list[float]:
    """The paired ratios of one result, oriented so that above 1 is ours ahead."""
    ours, other = result["ours"], result["other"]
    assert isinstance(ours, list) and isinstance(other, list)
    lower_better = "lower is better" in str(result["benchmark"])
    pairs = zip(ours, other, strict=True)
    return sorted((b / a if lower_better else a / b) if a and b else math.nan for a, b in pairs)


def spread(values: list[float]) -> str:
    """The interquartile range of four or more values, else their range."""
    if len(values) < 4:
        return f"{values[0]:.2f}–{values[-1]:.2f}"
    q1, _, q3 = statistics.quantiles(values, n=4)
    return f"{q1:.2f}–{q3:.2f}"


def verdict(result: dict[str, object], ratio: float) -> str:
    """Whether the result meets its target: "yes", "**no**", or "" without a target."""
    target = str(result.get("target") or "")
    if match := re.fullmatch(r"ours >= ([\d.]+)%", target):
        ours = result["ours"]
        assert isinstance(ours, list)
        met = statistics.median(ours) >= float(match.group(1))
    elif match := re.fullmatch(r">= ([\d.]+)", target):
        met = ratio >= float(match.group(1))
    else:
        return ""
    return "yes" if met else "**no**"


def result_rows(outcomes: list[Outcome]) -> list[str]:
    lines = [
        "| job | benchmark | precision | ours (median) | other (median) | ratio | spread | target | met |",
        "|---|---|---|---:|---:|---:|---|---|---|",
    ]
    for outcome in outcomes:
        for r in outcome.results:
            values = ratios(r)
            ratio = statistics.median(values)
            ours, other = r["ours"], r["other"]
            assert isinstance(ours, list) and isinstance(other, list)
            sides = f"{r['ours_name']}: {statistics.median(ours):,.1f} | "
            sides += f"{r['other_name']}: {statistics.median(other):,.1f}"
            lines.append(
                f"| {outcome.job.name} | {r['benchmark']} | {r['precision']} | {sides} "
                f"| **{ratio:.2f}** | {spread(values)} | {r.get('target') or ''} | {verdict(r, ratio)} |"
            )
    return lines


def job_rows(outcomes: list[Outcome], threads: int) -> list[str]:
    lines = ["| job | threads | exit status | wall s | peak RSS MiB |", "|---|---:|---:|---:|---:|"]
    for o in outcomes:
        own = o.job.threads or threads
        lines.append(f"| {o.job.name} | {own} | {o.status} | {o.seconds:,.0f} | {o.peak_mib:,.0f} |")
    return lines


def machine(device: str) -> str:
    """The section's heading: the CPU model and its kernel flags, or the GPU."""
    if device != "cpu" and torch.cuda.is_available():
        return f"GPU: {torch.cuda.get_device_name(torch.device(device))}"
    return f"CPU: {cpu_description()}"


def sections(existing: str) -> list[str]:
    """The machines' sections of the file's text ``existing``, each from its ``## `` heading on."""
    return [p for p in re.split(r"(?m)^(?=## )", existing) if p.startswith("## ")]


def earlier_rows(existing: str, heading: str, rerun: set[str]) -> dict[str, list[str]]:
    """The table rows (results and job lines) of the section under ``heading`` in ``existing``, by
    job name, of the jobs other than ``rerun``: what a run with ``--only`` keeps of the last run."""
    rows: dict[str, list[str]] = {}
    ours = [p for p in sections(existing) if p.splitlines()[0] == f"## {heading}"]
    names = {job.name for job in JOBS} - rerun
    for line in ours[0].splitlines() if ours else []:
        first = line.strip("|").split("|")[0].strip() if line.startswith("| ") else ""
        if first in names:
            rows.setdefault(first, []).append(line)
    return rows


def in_job_order(table: list[str], earlier: dict[str, list[str]]) -> list[str]:
    """``table`` (its header, its rule, the rows of the jobs run now) with the rows of ``earlier``
    that belong to such a table (as many cells), every job's rows in the order of :data:`JOBS`."""
    width = table[0].count("|")
    rows = {job.name: [r for r in table[2:] if r.startswith(f"| {job.name} |")] for job in JOBS}
    for name, lines in earlier.items():
        rows[name] = [r for r in lines if r.count("|") == width]
    return table[:2] + [r for job in JOBS for r in rows[job.name]]


def section(
    outcomes: list[Outcome], heading: str, threads: int, quick: bool, only: str | None = None,
    earlier: dict[str, list[str]] | None = None,
) -> str:  # fmt: skip
    try:
        import transformers

        hf = transformers.__version__
    except ImportError:
        hf = "not installed"
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    about = (
        f"torch {torch.__version__}, transformers {hf}, {threads} threads (a job may set its own), "
        f"{os.cpu_count()} cores, {when}; "
        f"`python benchmarks/run_all.py{' --quick' if quick else ''}{f' --only {only}' if only else ''}`"
        f"{' (smoke runs: tiny models, few repetitions)' if quick else ''}"
        f"{'; the rows of the other jobs are those of the run before' if earlier else ''}"
    )
    results, jobs = result_rows(outcomes), job_rows(outcomes, threads)
    if earlier:
        results, jobs = in_job_order(results, earlier), in_job_order(jobs, earlier)
    body = [f"## {heading}", "", about, "", *results, "", *jobs, ""]
    return "\n".join(body)


def merged(existing: str, heading: str, new_section: str) -> str:
    """``existing`` (the file) with the section under ``heading`` replaced by ``new_section``, or it
    appended; the other machines' sections kept in their order."""
    parts = re.split(r"(?m)^(?=## )", existing)
    fresh = f"{TITLE}\n\n{__doc__.splitlines()[0]}\n\n"
    intro = parts[0] if parts[0].strip() and not parts[0].startswith("## ") else fresh
    machines = sections(existing)
    kept = [p if p.splitlines()[0] != f"## {heading}" else new_section + "\n" for p in machines]
    if not any(p.splitlines()[0] == f"## {heading}" for p in machines):
        kept.append(new_section + "\n")
    return intro + "".join(kept)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="every benchmark's smoke run (minutes in all)")
    parser.add_argument("--threads", type=int, default=available_cores(), help="torch threads of every job")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda[:N] for the jobs that take a device")
    parser.add_argument("--only", help="comma-separated words: run the jobs whose names contain one")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="the markdown file (default %(default)s)")
    args = parser.parse_args(argv)
    jobs = JOBS
    if args.only:
        words = [w.strip() for w in args.only.split(",") if w.strip()]
        jobs = tuple(j for j in JOBS if any(w in j.name for w in words))
        if not jobs:
            print(f"run_all.py: error: --only {args.only}: no job matches", file=sys.stderr)
            return 2
    if args.device != "cpu":
        jobs = tuple(j for j in jobs if j.device)
    heading = machine(args.device)
    print(f"{heading}; {len(jobs)} jobs", flush=True)
    outcomes = [run_job(job, args.quick, args.threads, args.device) for job in jobs]
    existing = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
    earlier = earlier_rows(existing, heading, {job.name for job in jobs}) if args.only else None
    new_section = section(outcomes, heading, args.threads, args.quick, args.only, earlier)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    temporary = args.output.with_suffix(".tmp")
    temporary.write_text(merged(existing, heading, new_section), encoding="utf-8")
    temporary.replace(args.output)
    print(f"\n{new_section}\nwritten to {args.output}")
    return 1 if any(o.status for o in outcomes) else 0


if __name__ == "__main__":
    raise SystemExit(main())
