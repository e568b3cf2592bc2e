"""The translation results table: the autoregressive Transformer (greedy, beam 5), the same run
fine-tuned with minimum risk training (against as many minutes more of the token-level loss), CMLM
decoded by Mask-Predict with and without distillation, a deep-encoder shallow-decoder Transformer
(6 + 1 layers, Kasai et al. 2021) and the LSTM encoder-decoder with attention, on Multi30k de→en
and on the embedded en→zh corpus.

Runs the documented commands through the command-line tool, ``--jobs`` (2) at a time with one
thread each (``--threads 1``), every log in ``OUT/NAME.log`` (``benchmarks/jobs.py``):

- Multi30k (``configs/multi30k.yaml``, the LSTM ``configs/multi30k-rnn.yaml``; the data in
  ``../shared/data/multi30k``): every model for the same ``--minutes`` of training steps (45) on one
  core, all but the undistilled CMLM (``LEFT_OUT``), the 6 + 1 also Pre-LN, the Transformer also with a
  second seed (``--seed 1``) and for ``--long-minutes`` (100: the Transformer at a budget nearer
  convergence), and the distilled CMLM continued from its run (``--init``) for ``--more-minutes`` (80)
  more; the fine-tunings of the autoregressive run for ``--fine-tune-minutes`` (8) each, at a
  constant learning rate of 1e-4;
- the embedded en→zh corpus: every model for ``--zh-steps`` (3,000: where each has converged, its
  validation BLEU flat), the Transformer and the LSTM also with a second seed (``--seed 1``) to show
  the spread; the fine-tunings for ``--fine-tune-minutes`` / 4.

Once a corpus's runs are done, a job of its own (``--score CORPUS``, one thread) scores them one at a
time on their test split (test2016 for Multi30k): every decoding over the whole split at batch 64
(sacreBLEU cased and lowercased, chrF, sentences/s), then the first ``--timed`` (100) test sentences
one call each (batch 1); an autoregressive run also with beam 5 at the GNMT length penalty α of
``PENALTIES`` that scores best on its valid split; and BLEU by source length for the Transformer and
the RNN (the long-distance claim). Each corpus's part is kept as ``OUT/CORPUS.md``; the table, with
the commands, goes to ``--results``.

    python benchmarks/translation_results.py --out runs/translation_results      # about four hours
    (the same call again trains and scores only what an earlier one left undone)
    python benchmarks/translation_results.py --out runs/translation_results --report   # score again
    python benchmarks/translation_results.py --quick   # a smoke run: the seven models, tiny, 3 steps
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from jobs import ROOT, Job, run_all, shown, write_table
from length_buckets import buckets, name_of, scored
from timing import cpu_description

from vaswani.data.batching import pad
from vaswani.data.config import NatData, ParallelData
from vaswani.generation.config import GREEDY, DecodingConfig
from vaswani.generation.mask_predict import MaskPredictConfig, mask_predict
from vaswani.metrics import bleu, chrf
from vaswani.pipelines.nat import NatTranslator
from vaswani.pipelines.translation import TASK, Translator
from vaswani.rundir import RunDir
from vaswani.tasks import translation

RESULTS = ROOT / "benchmarks" / "results" / "translation.md"
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"
FINE_TUNE = shlex.split("--lr 1e-4 --schedule constant --warmup 0 --max-steps 1000000 --batch-tokens 1000")
DESD = shlex.split("--encoder-layers 6 --decoder-layers 1")
M30K_RNN = ["--config", "configs/multi30k-rnn.yaml"]  # the LSTM's own recipe, not the Transformer's
# The runs a corpus leaves out (their rows shown only where the run exists). Multi30k: the undistilled
# CMLM, whose comparison with the distilled one the embedded corpus shows (and the 25-minute Multi30k
# table: 18.05 against 25.89 BLEU at T = 10, l = 5), as at 45 minutes a model the others take about
# 2 hours on two cores, and the LSTM's second seed (the Transformer's shows the spread). The embedded
# corpus: the Pre-LN 6 + 1, as its Post-LN one converges there (99.40, translation-deep-shallow.yaml),
# where on Multi30k it learns about 3x slower a step, and the Transformer's longer budget, as every
# model there converges within its steps, and so the distilled CMLM continued.
LEFT_OUT = {"m30k": ("cmlm", "rnn-seed1"), "zh": ("desd-pre", "ar-long", "cmlm-distill-more")}
OPTIONAL = {name for names in LEFT_OUT.values() for name in names}
MRT = ["--mrt-candidates", "4"]  # not mrt.yaml's 16: what the table's minutes were measured with
ITERATIONS, LENGTH_BEAMS = (1, 4, 10), (1, 3, 5)
ZH_STEPS = 3000  # every en→zh model's validation BLEU is flat by then (the LSTM's by 1,500 steps)
CMLM_MORE = ["--lr", "7e-4", "--warmup-steps", "300"]  # a warm restart of the CMLM's 1e-3 schedule
PENALTIES = (0.6, 1.0, 1.5, 2.0, 2.5)  # GNMT's α tried on the valid split (0.6: Wu et al.'s, the default)


def corpus_plan(
    prefix: str,
    base: list[str],
    budget: list[str],
    tune: list[str],
    out: Path,
    seeds: Sequence[int] = (),
    rnn: Sequence[str] = (),
    long: Sequence[str] = (),
    more: Sequence[str] = (),
) -> list[Job]:
    """The runs of one corpus (``kept`` drops those it leaves out), and the Transformer and the LSTM
    again with each of ``seeds``: ``base`` names the corpus and model settings, ``rnn`` the LSTM's
    instead where they differ (its own config), ``budget`` the training budget of every model,
    ``long`` the Transformer's longer one (``ar-long``; ``budget`` where none), ``more`` the distilled
    CMLM's continuation (``cmlm-distill-more``; ``budget`` where none), ``tune`` the fine-tunings'
    settings. In the order they start: the models the targets compare first, the
    undistilled CMLM last."""
    one = ["--threads", "1", "--quiet"]

    def job(name: str, task: str, *args: str, after: Sequence[str] = ()) -> Job:
        run = ["train", task, *args, *one, "--out", str(out / f"{prefix}-{name}")]
        return Job(f"{prefix}-{name}", run, [f"{prefix}-{a}" for a in after])

    ar = str(out / f"{prefix}-ar")
    init = ["--init", ar, *tune]
    lstm = [*(rnn or base), *budget, "--arch", "rnn"]
    return [
        job("ar", "translation", *base, *budget),
        job("rnn", "translation", *lstm),
        job("desd", "translation", *base, *budget, *DESD),
        job("desd-pre", "translation", *base, *budget, *DESD, "--norm-placement", "pre"),
        job("cmlm-distill", "nat", *base, *budget, "--distill-from", ar, after=["ar"]),
        job(
            "cmlm-distill-more",
            "nat",
            *base,
            *(more or budget),
            *CMLM_MORE,
            "--init",
            str(out / f"{prefix}-cmlm-distill"),
            "--distill-from",
            ar,
            after=["cmlm-distill"],
        ),
        job("mrt", "translation", *init, "--objective", "mrt", *MRT, after=["ar"]),
        job("tok", "translation", *init, "--objective", "token", after=["ar"]),
        *(job(f"ar-seed{n}", "translation", *base, *budget, "--seed", str(n)) for n in seeds),
        *(job(f"rnn-seed{n}", "translation", *lstm, "--seed", str(n)) for n in seeds),
        job("ar-long", "translation", *base, *(long or budget)),
        job("cmlm", "nat", *base, *budget),
    ]


def kept(jobs: list[Job]) -> list[Job]:
    """A corpus's runs but those it leaves out (``LEFT_OUT``)."""
    return [job for job in jobs if job.name.partition("-")[2] not in LEFT_OUT[job.name.partition("-")[0]]]


CORPORA = {"m30k": "Multi30k de→en, test2016", "zh": "The embedded en→zh corpus"}
EDGES = {"m30k": [10, 15, 20], "zh": [4, 6, 8, 10]}  # the source-length buckets' last lengths


def quick_plan(out: Path) -> list[Job]:
    """``--quick``: the embedded corpus's seven runs and its scoring, as tiny models trained for a few
    steps on the corpus of ``benchmarks/quick.py`` (a smoke run of the whole script)."""
    import quick

    src, tgt = quick.parallel_corpus(out)
    base = ["--src", str(src), "--tgt", str(tgt), *quick.TINY_MODEL, "--batch-tokens", "256"]
    steps = ["--max-steps", "3", "--eval-every", "1000"]
    runs = kept(corpus_plan("zh", base, steps, [*FINE_TUNE, *steps], out))
    score = ["--score", "zh", "--out", str(out), "--timed", "2"]
    return [*runs, Job("zh-score", score, [r.name for r in runs], [str(Path(__file__).resolve())])]


def plan(
    out: Path,
    minutes: float,
    tune_minutes: float,
    timed: int,
    zh_steps: int,
    long_minutes: float,
    more_minutes: float,
) -> list[Job]:
    """The Multi30k runs first (the longest), then the embedded corpus's; each corpus scored on one
    thread once its runs are done (``--score``)."""
    m30k = ["--config", "configs/multi30k.yaml"]
    m30k_tune = [
        *FINE_TUNE,
        "--max-minutes",
        f"{tune_minutes:g}",
        "--precision",
        "bf16",
        "--eval-every",
        "100",
    ]
    zh_tune = [*FINE_TUNE, "--max-minutes", f"{tune_minutes / 4:g}", "--eval-every", "100"]
    jobs = []
    for prefix, runs in (
        (
            "m30k",
            kept(
                corpus_plan(
                    "m30k",
                    m30k,
                    ["--max-minutes", f"{minutes:g}"],
                    m30k_tune,
                    out,
                    SEEDS,
                    M30K_RNN,
                    ["--max-minutes", f"{long_minutes:g}"],
                    ["--max-minutes", f"{more_minutes:g}"],
                )
            ),
        ),
        (
            "zh",
            kept(corpus_plan("zh", [], ["--max-steps", str(zh_steps)], zh_tune, out, seeds=SEEDS)),
        ),
    ):
        score = ["--score", prefix, "--out", str(out), "--minutes", f"{minutes:g}", "--timed", str(timed)]
        score += ["--zh-steps", str(zh_steps)]
        jobs += [
            *runs,
            Job(f"{prefix}-score", score, [r.name for r in runs], [str(Path(__file__).resolve())]),
        ]
    return jobs


Translate = Callable[[Sequence[str], int], list[str]]


def timed(translate: Translate, sources: Sequence[str], batch: int) -> tuple[list[str], float]:
    """The translations of ``sources`` in calls of ``batch`` sentences, and sentences per second
    (after one warm-up call of the first batch)."""
    translate(sources[:batch], batch)
    start, hyps = time.perf_counter(), []
    for i in range(0, len(sources), batch):
        hyps += translate(sources[i : i + batch], batch)
    return hyps, len(sources) / (time.perf_counter() - start)


def scores(hyps: list[str], refs: list[str], tokenize: str) -> tuple[str, list[str]]:
    """BLEU cased | lowercased | chrF cells, and their sacreBLEU signatures."""
    cased, lower = bleu(hyps, refs, tokenize), bleu(hyps, refs, tokenize, lowercase=True)
    char = chrf(hyps, refs)
    return f"{cased.value:.2f} | {lower.value:.2f} | {char.value:.2f}", [
        cased.signature,
        lower.signature,
        char.signature,
    ]


def training(run: Path) -> str:
    """A run's training cells: tokens/s, steps and minutes of steps."""
    m = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    return f"{m['tokens_per_second']:,.0f} | {m['steps']:,} | {m['train_seconds'] / 60:.1f}"


def is_nat(run: Path) -> bool:
    return RunDir(run).read_config().task == "nat"


def run_data(run: Path) -> translation.TranslationData:
    """The splits of a run's corpus (a distilled run trained on its teacher's translations of the
    training sources instead)."""
    task, section = ("nat", NatData) if is_nat(run) else (TASK, ParallelData)
    return translation.load_data(RunDir(run).read_config(task, section).data)  # type: ignore[arg-type]


def test_pairs(run: Path) -> list[tuple[str, str]]:
    """The run's test split (its valid split where it has none)."""
    data = run_data(run)
    return data.test or data.valid


def teacher_run(run: Path) -> Path | None:
    """The autoregressive run that ranks a nat run's candidates in the rows "…, teacher": the run it
    was distilled from, else its corpus's Transformer beside it (``PREFIX-ar``); None where neither
    is there."""
    distilled_from = RunDir(run).read_config("nat", NatData).data.distill_from
    found = (
        Path(str(distilled_from))
        if distilled_from is not None
        else run.parent / f"{run.name.split('-')[0]}-ar"
    )
    return found if (found / "metrics.json").is_file() else None


def decodings(run: Path) -> list[tuple[str, Translate, str]]:
    """(name, translate, BLEU tokenizer) of each decoding a run's rows show."""
    if is_nat(run):
        nat = NatTranslator.load(run, "cpu")

        def mask_predict(config: MaskPredictConfig) -> Translate:
            return lambda sources, batch: nat.translate(sources, config, batch)

        grid = [
            (f"Mask-Predict T = {t}, l = {n}", mask_predict(MaskPredictConfig(t, n)), nat.bleu_tokenize)
            for t in ITERATIONS
            for n in LENGTH_BEAMS
        ]
        joint = [  # the candidates ranked with their length's log-probability (rank_by="joint")
            (
                f"Mask-Predict T = 10, l = {n}, joint",
                mask_predict(MaskPredictConfig(10, n, "joint")),
                nat.bleu_tokenize,
            )
            for n in LENGTH_BEAMS[1:]
        ]
        teacher = teacher_run(run)
        if teacher is None:
            return grid + joint
        nat.with_teacher(Translator.load(teacher, "cpu"), str(teacher))
        ranked = [  # by the autoregressive teacher's log P(y | x) (rank_by="teacher")
            (
                f"Mask-Predict T = 10, l = {n}, teacher",
                mask_predict(MaskPredictConfig(10, n, "teacher")),
                nat.bleu_tokenize,
            )
            for n in LENGTH_BEAMS[1:]
        ]
        return grid + joint + ranked
    ar = Translator.load(run, "cpu")

    def autoregressive(config: DecodingConfig) -> Translate:
        return lambda sources, batch: ar.translate(sources, config, batch)

    alpha = valid_alpha(ar, run_data(run).valid)
    return [
        ("greedy", autoregressive(GREEDY), ar.bleu_tokenize),
        ("beam 5", autoregressive(DecodingConfig(beam=5)), ar.bleu_tokenize),
        (
            f"{TUNED}, α = {alpha:g}",
            autoregressive(DecodingConfig(beam=5, length_penalty=alpha)),
            ar.bleu_tokenize,
        ),
    ]


TUNED = "beam 5, valid's length penalty"  # the rows of valid_alpha's α


def valid_alpha(ar: Translator, valid: Sequence[tuple[str, str]]) -> float:
    """The α of ``PENALTIES`` (GNMT's length penalty) whose beam 5 scores the best BLEU on ``valid``
    (the first of equals): the tuning on held-out data that Wu et al.'s 0.6 came from on WMT."""
    sources, refs = [s for s, _ in valid], [t for _, t in valid]
    found = [
        bleu(
            ar.translate(sources, DecodingConfig(beam=5, length_penalty=a), 64), refs, ar.bleu_tokenize
        ).value
        for a in PENALTIES
    ]
    return PENALTIES[found.index(max(found))]


SEEDS = (1,)  # the second seed of the Transformer (both corpora) and of the en→zh LSTM
MODELS = {
    "ar": "Transformer",
    **{f"ar-seed{n}": f"Transformer, seed {n}" for n in SEEDS},
    "ar-long": "Transformer, longer budget",
    "mrt": "Transformer + MRT",
    "tok": "Transformer + token loss",
    "cmlm": "CMLM",
    "cmlm-distill": "CMLM, distilled",
    "cmlm-distill-more": "CMLM, distilled, continued",
    "desd": "Transformer 6 + 1",
    "desd-pre": "Transformer 6 + 1, Pre-LN",
    "rnn": "LSTM + attention",
    **{f"rnn-seed{n}": f"LSTM + attention, seed {n}" for n in SEEDS},
}
SAME_MODEL = ("mrt", "tok")  # the Transformer's shape: its speed is the ar rows'


def corpus_rows(
    out: Path, prefix: str, timed_sentences: int
) -> tuple[list[str], dict[str, dict[str, float]]]:
    """The table rows of one corpus, and the figures the targets are read from (BLEU and batch-1
    sentences/s by run and decoding)."""
    rows, figures = [], {}
    for name, model in MODELS.items():
        run = out / f"{prefix}-{name}"
        if ("-seed" in name or name in OPTIONAL) and not run.is_dir():
            continue  # a second seed, and the runs a corpus leaves out (LEFT_OUT), where they ran
        if not (run / "metrics.json").is_file():
            rows.append(f"| {model} | not trained: no OUT/{run.name}/metrics.json |" + " |" * 8)
            continue
        pairs = test_pairs(run)
        sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
        first = True
        for decoding, translate, tokenize in decodings(run):
            hyps, batch64 = timed(translate, sources, 64)
            if name in SAME_MODEL:
                speed = "as the Transformer | as the Transformer"
            else:
                batch1 = timed(translate, sources[:timed_sentences], 1)[1]
                speed = f"{batch1:.1f} | {batch64:.1f}"
                figures.setdefault(name, {})[f"{decoding} speed"] = batch1
                figures[name][f"{decoding} batch 64"] = batch64
            figures.setdefault(name, {})[decoding] = bleu(hyps, refs, tokenize).value
            figures[name][f"{decoding} lowercased"] = bleu(hyps, refs, tokenize, lowercase=True).value
            train = training(run) if first else "| |"
            scored_cells, signatures = scores(hyps, refs, tokenize)
            cells = f"{decoding} | {scored_cells} | {speed} | {train}"
            rows.append(f"| {model if first else ''} | {cells} |")
            first = False
            print(rows[-1], flush=True)
    return rows, figures, signatures


BEHIND = {"m30k": 2.0, "zh": 1.0}  # the most BLEU the distilled CMLM may trail its teacher's greedy


def teacher_of(out: Path, prefix: str) -> str | None:
    """The name in ``MODELS`` of the run the corpus's distilled CMLM learned from (its
    ``--distill-from``; the continued one's where the first is not in ``out``), None where there is
    no such run in ``out``."""
    for cmlm in ("cmlm-distill", "cmlm-distill-more"):
        run = out / f"{prefix}-{cmlm}"
        if (run / "metrics.json").is_file():
            teacher = RunDir(run).read_config("nat", NatData).data.distill_from
            name = Path(str(teacher)).name.removeprefix(f"{prefix}-")
            return name if name in MODELS else None
    return None


def tuned_key(figures: dict[str, float], decoding: str) -> str:
    """The key of ``decoding``'s BLEU in a run's ``figures``: for ``TUNED``, the row's name with its α."""
    return decoding if decoding != TUNED else min((k for k in figures if k.startswith(TUNED)), key=len)


def targets(figures: dict[str, dict[str, float]], prefix: str, teacher: str | None) -> list[str]:
    """The issue's targets, read from one corpus's figures (where its runs were trained): the
    distilled CMLM against the autoregressive run it learned from (``teacher``), MRT against the
    token-level loss."""
    lines = []
    for name in [n for n in ("cmlm-distill", "cmlm-distill-more") if n in figures and teacher in figures]:
        cmlm, best, ar, model = (
            figures[name],
            "Mask-Predict T = 10, l = 5",
            figures[str(teacher)],
            MODELS[name],
        )
        behind = ar["greedy"] - cmlm[best]
        faster = cmlm[f"{best} speed"] / ar["beam 5 speed"]
        lines.append(
            f"- {model}, T = 10, l = 5: {behind:.2f} BLEU below the greedy decoding of its teacher, "
            f"{MODELS[str(teacher)]} (target: at most {BEHIND[prefix]:g}), and {faster:.2f}× the sentences/s "
            "of the teacher's beam 5 at batch 1 (target: at least 3×)."
        )
        joint_behind = ar["greedy"] - cmlm[f"{best}, joint"]
        lines.append(
            f"- {model}, T = 10, l = 5, joint ranking: {joint_behind:.2f} BLEU below the teacher's greedy."
        )
        if f"{best}, teacher" in cmlm:
            ranked_behind = ar["greedy"] - cmlm[f"{best}, teacher"]
            lines.append(
                f"- {model}, T = 10, l = 5, ranked by the teacher: {ranked_behind:.2f} BLEU below the "
                "teacher's greedy."
            )
        batched = cmlm[f"{best} batch 64"] / cmlm[f"{best} speed"]
        lines.append(
            f"- {model}, T = 10, l = 5: {batched:.2f}× its batch-1 sentences/s at batch 64 (target: at "
            "least 3×)."
        )
    for name in [n for n in ("ar", "ar-long") if n in figures] if prefix == "m30k" else ():
        tuned = tuned_key(figures[name], TUNED)
        lines.append(
            f"- {MODELS[name]}, lowercased BLEU with beam 5: {figures[name]['beam 5 lowercased']:.2f} at "
            f"α = 0.6, {figures[name][f'{tuned} lowercased']:.2f} at the valid split's best "
            f"({tuned.rpartition(', ')[2]}) (target: at least 40)."
        )
    for decoding in ("greedy", "beam 5", TUNED) if {"mrt", "tok"} <= figures.keys() else ():
        mrt, tok = (tuned_key(figures[n], decoding) for n in ("mrt", "tok"))
        gain = figures["mrt"][mrt] - figures["tok"][tok]
        alphas = f"; MRT at {mrt[len(TUNED) + 2 :]}, the token loss at {tok[len(TUNED) + 2 :]}"
        lines.append(
            f"- MRT against the same minutes of the token-level loss, {decoding}: {gain:+.2f} BLEU (target: "
            f"at least +0.5){alphas if decoding == TUNED else ''}."
        )
    return lines


def length_oracle(run: Path, name: str, batch: int = 64, seen: int = 1000) -> str:
    """A line on a nat run's length classifier: test BLEU at T = 10, l = 1 with the classifier's
    length and with the reference's, how often the two agree, how often the reference's length is
    among the classifier's two most likely, and how often it agrees on the first ``seen`` training
    pairs (sources it was trained on: a classifier that fits them but not the test split has
    learned their lengths, not how a new sentence's length follows from its words)."""
    nat, pairs = NatTranslator.load(run, "cpu"), test_pairs(run)
    config, most, pad_id = MaskPredictConfig(10, 1), nat.cmlm.length_classes - 1, nat.cmlm.config.pad_id

    def encoded(some: Sequence[tuple[str, str]]) -> tuple[list[list[int]], list[int]]:
        targets = nat.tgt_tok.encode_batch([t for _, t in some])
        return nat.src_tok.encode_batch([s for s, _ in some]), [min(max(len(t), 1), most) for t in targets]

    sources, wanted = encoded(pairs)
    found: dict[str, list[str]] = {"own": [], "given": []}
    agree = top_two = 0
    with torch.no_grad():
        for start in range(0, len(pairs), batch):
            rows, lengths = sources[start : start + batch], torch.tensor(wanted[start : start + batch])
            src = pad(rows, pad_id)
            for kind, given in (("own", None), ("given", lengths)):
                out = mask_predict(nat.cmlm, src, nat.mask_id, config, nat.suppressed, lengths=given)
                found[kind] += [
                    nat.tgt_tok.decode(t[:n])
                    for t, n in zip(out.tokens.tolist(), out.lengths.tolist(), strict=True)
                ]
                agree += int((out.lengths == lengths).sum()) if given is None else 0
            likely = nat.cmlm.length_logits(nat.cmlm.encode(src)).topk(2, dim=1).indices
            top_two += int((likely == lengths[:, None]).any(1).sum())
        train_sources, train_wanted = encoded(run_data(run).train[:seen])
        trained = 0
        for start in range(0, len(train_sources), batch):
            logits = nat.cmlm.length_logits(
                nat.cmlm.encode(pad(train_sources[start : start + batch], pad_id))
            )
            trained += int((logits.argmax(1) == torch.tensor(train_wanted[start : start + batch])).sum())
    refs = [t for _, t in pairs]
    own, given_bleu = (bleu(found[k], refs, nat.bleu_tokenize).value for k in ("own", "given"))
    return (
        f"- {MODELS[name]}, Mask-Predict T = 10, l = 1: {own:.2f} BLEU with its length classifier, "
        f"{given_bleu:.2f} given the reference's length; the classifier picks the reference's length for "
        f"{agree / max(1, len(pairs)):.1%} of the {len(pairs):,} test sentences (among its two most likely "
        f"lengths for {top_two / max(1, len(pairs)):.1%}), and for "
        f"{trained / max(1, len(train_sources)):.1%} of the first {len(train_sources):,} training pairs."
    )


def length_table(out: Path, prefix: str, edges: list[int]) -> list[str]:
    """BLEU / chrF (sentences) by source length of the corpus's Transformer and RNN (greedy)."""
    lines = [
        "| run | " + " | ".join(f"{name_of(b)} words" for b in buckets(edges)) + " |",
        "|---" * (len(edges) + 2) + "|",
    ]
    for name in [n for n in ("ar", "rnn") if (out / f"{prefix}-{n}" / "metrics.json").is_file()]:
        cells = scored(out / f"{prefix}-{name}", edges)[1]
        lines.append(f"| {MODELS[name]} | " + " | ".join(cells) + " |")
    return lines


HEADER = [
    "| model | decoding | BLEU | BLEU (lowercased) | chrF | sentences/s, batch 1 | sentences/s, batch 64 "
    "| training tokens/s | steps | training minutes |",
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
]


def section(args: argparse.Namespace, out: Path, prefix: str) -> str:
    """Score one corpus's runs: its part of the table, also kept as ``OUT/PREFIX.md``."""
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    rows, figures, signatures = corpus_rows(out, prefix, args.timed)
    cased, lower, char = (f"`{s}`" for s in signatures)
    budget = (
        f"{args.minutes:g} minutes of training a model"
        if prefix == "m30k"
        else f"{args.zh_steps:,} steps a model"
    )
    lines = [
        f"## {CORPORA[prefix]}: {budget}",
        "",
        f"Scored on {torch.get_num_threads()} thread(s), load average {os.getloadavg()[0]:.1f} at the start, "
        f"{(time.perf_counter() - start) / 60:.1f} minutes, "
        f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}.",
        "",
        *HEADER,
        *rows,
        "",
        f"Signatures: BLEU {cased}, lowercased {lower}; chrF {char}.",
        "",
        *targets(figures, prefix, teacher_of(out, prefix)),
        *[
            length_oracle(out / f"{prefix}-{name}", name)
            for name in ("cmlm", "cmlm-distill", "cmlm-distill-more")
            if (out / f"{prefix}-{name}" / "metrics.json").is_file()
        ],
        "",
        "BLEU / chrF (sentences) by source length in words, greedy:",
        "",
        *length_table(out, prefix, EDGES[prefix]),
        "",
    ]
    text = "\n".join(lines)
    (out / f"{prefix}.md").write_text(text, encoding="utf-8")
    return text


def write_results(args: argparse.Namespace, out: Path, jobs: list[Job]) -> None:
    """The table: every corpus's part (``OUT/PREFIX.md``), with the commands that made the runs."""
    parts = [
        (out / f"{p}.md").read_text(encoding="utf-8")
        if (out / f"{p}.md").is_file()
        else f"## {CORPORA[p]}: not scored yet (no OUT/{p}.md: `--score {p}` once its runs are trained)\n"
        for p in CORPORA
    ]
    commands = [shlex.join(job.command()).replace(str(out), "OUT") for job in jobs]
    call = "python benchmarks/translation_results.py"
    call += f" --minutes {args.minutes:g}" if args.minutes != 45 else ""
    call += f" --fine-tune-minutes {args.fine_tune_minutes:g}" if args.fine_tune_minutes != 8 else ""
    call += f" --long-minutes {args.long_minutes:g}" if args.long_minutes != 100 else ""
    call += f" --more-minutes {args.more_minutes:g}" if args.more_minutes != 80 else ""
    call += f" --zh-steps {args.zh_steps}" if args.zh_steps != ZH_STEPS else ""
    call += f" --jobs {args.jobs}" if args.jobs != 2 else ""
    call += f" --corpus {args.corpus}" if args.corpus else ""
    call += " --out OUT" if args.out else ""
    lines = [
        "# Translation: autoregressive, non-autoregressive, minimum risk and the RNN",
        "",
        f"Written by `{call}` on {cpu_description()}, torch {torch.__version__}, python "
        f"{platform.python_version()}. Training: {args.jobs} run(s) at a time, one thread each. Scoring: one "
        "run at a time, each decoding over the whole test split at batch 64 (BLEU, chrF and its "
        f"sentences/s, wall clock), then the first {args.timed} test sentences one call each (batch 1). "
        "The MRT and token-loss rows fine-tune the Transformer's selected weights at a constant 1e-4 for "
        f"{args.fine_tune_minutes:g} more minutes on Multi30k ({args.fine_tune_minutes / 4:g} on en→zh); "
        "every run is scored with the weights `vaswani evaluate` uses (the best by validation BLEU).",
        "",
        *parts,
        "The jobs (OUT: the `--out` folder):",
        "",
        "```bash",
        *commands,
        "```",
    ]
    write_table(args.results, lines)


def pending(jobs: list[Job], out: Path) -> list[Job]:
    """The jobs an earlier call with this ``--out`` left undone (a run without its ``metrics.json``, a
    corpus without its ``OUT/CORPUS.md`` or with a run still to train), waiting only for each other;
    a run begun and not finished is refused in one line (remove it to train it again)."""
    finished = set()
    for job in jobs:
        prefix, _, name = job.name.partition("-")
        if name == "score":
            if (out / f"{prefix}.md").is_file() and set(job.after) <= finished:
                finished.add(job.name)
        elif (out / job.name / "metrics.json").is_file():
            finished.add(job.name)
        elif (out / job.name).exists():
            raise SystemExit(
                f"{shown(out / job.name)}: a run begun and not finished; remove it to train it again"
            )
    return [
        Job(j.name, j.args, [a for a in j.after if a not in finished], j.program)
        for j in jobs
        if j.name not in finished
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=45.0, help="Multi30k training minutes a model (45)")
    parser.add_argument(
        "--fine-tune-minutes", type=float, default=8.0, help="Multi30k fine-tuning minutes (8)"
    )
    parser.add_argument(
        "--long-minutes", type=float, default=100.0, help="the Multi30k Transformer's longer budget (100)"
    )
    parser.add_argument(
        "--more-minutes", type=float, default=80.0, help="the Multi30k distilled CMLM's continuation (80)"
    )
    parser.add_argument(
        "--zh-steps", type=int, default=ZH_STEPS, help=f"en→zh training steps a model ({ZH_STEPS:,})"
    )
    parser.add_argument("--jobs", type=int, default=2, help="runs at once, one thread each (2)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the scoring (1)")
    parser.add_argument("--timed", type=int, default=100, help="test sentences timed at batch 1 (100)")
    parser.add_argument(
        "--out", type=Path, help="keep the run directories here (default: a temporary folder)"
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"the table (default {shown(RESULTS)})")
    parser.add_argument(
        "--report", action="store_true", help="train nothing: score the runs of an earlier --out"
    )
    parser.add_argument("--score", choices=CORPORA, help="only score this corpus's runs of --out (a job)")
    parser.add_argument(
        "--corpus",
        choices=CORPORA,
        help="train and score only this corpus (the table keeps the other's OUT/CORPUS.md)",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny models, 3 steps, no table")
    args = parser.parse_args(argv)
    if args.quick:
        with tempfile.TemporaryDirectory() as scratch:
            run_all(quick_plan(Path(scratch)), Path(scratch), args.jobs)
            print((Path(scratch) / "zh.md").read_text(encoding="utf-8"))
        return
    if (args.report or args.score) and args.out is None:
        parser.error("--report and --score need --out, the folder of the earlier runs")
    if args.score:  # scores runs already trained: needs no corpus on disk (the quick run's have none)
        section(args, args.out.resolve(), args.score)
        return
    if not (MULTI30K / "train.de").is_file():
        print(f"skipped: no Multi30k in {shown(MULTI30K)}")
        return
    with tempfile.TemporaryDirectory() as scratch:
        out = (args.out or Path(scratch)).resolve()
        out.mkdir(parents=True, exist_ok=True)
        jobs = plan(
            out,
            args.minutes,
            args.fine_tune_minutes,
            args.timed,
            args.zh_steps,
            args.long_minutes,
            args.more_minutes,
        )
        if args.report:
            for prefix in CORPORA:
                section(args, out, prefix)
        else:
            chosen = [j for j in jobs if args.corpus in (None, j.name.partition("-")[0])]
            run_all(pending(chosen, out), out, args.jobs)
        write_results(args, out, jobs)


if __name__ == "__main__":
    main()
