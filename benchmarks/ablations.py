"""The ablations the seeds argue about: norm placement × position scheme × learning-rate warmup.

Trains one model (``--corpus``: the Multi30k model of ``configs/multi30k.yaml``, 3 + 3 layers, 256
dimensions, shared BPE, bf16 autocast, with smaller batches than the recipe's for more steps in a
short budget; or ``zh``, the embedded en→zh corpus and model of ``vaswani train translation``, where
every model converges in minutes) once for each of the 3 × 3 × 2 combinations of

- the norm, by the names of its kind and placement together (``model.norm``,
  ``model.norm_placement``): post_ln (LayerNorm, post: the paper's), pre_ln (LayerNorm, pre),
  pre_rmsnorm (RMSNorm, pre);
- ``model.position``: sinusoidal, learned, relative (Shaw et al. 2018);
- warmup: linear over the first quarter of the steps (`--warmup`) or none, then cosine decay;

at a fixed, smaller budget of optimizer steps (the same batches in the same order for every run,
so that runs done side by side or on a busy machine give the same figures). Each run reports greedy
BLEU on the test split (sacreBLEU), its last validation loss, and whether it failed: a non-finite
loss that stopped training, a final validation loss no better than the unigram distribution of
the target tokens (the model learned nothing from the source or the context), or a test BLEU below
1 (it translates nothing). The published claim checked here: Pre-LN trains well without warmup,
where Post-LN needs it (Xiong et al. 2020).

Writes ``ablations.md`` (``ablations_zh.md`` for ``--corpus zh``: the table, with the command) and
its ``.png`` (validation loss against steps, one panel with warmup and one without) to ``--results``:

    python benchmarks/ablations.py                      # 18 runs of 200 steps, two at a time (~30 min)
    python benchmarks/ablations.py --steps 40 --norms post_ln --positions sinusoidal   # two runs
    python benchmarks/ablations.py --corpus zh --steps 600 --layers 6 --out runs/ablations-zh
    python benchmarks/ablations.py --quick    # a smoke run: two runs of 2 steps on a tiny corpus

``--layers`` and ``--lr`` change the depth of both stacks and the peak learning rate of every run:
Post-LN's need for warmup grows with both (Xiong et al. 2020, their 6-layer models).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import multiprocessing
import os
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NORMS = ("post_ln", "pre_ln", "pre_rmsnorm")
POSITIONS = ("sinusoidal", "learned", "relative")
SPLITS = {
    "src": "train.de", "tgt": "train.en", "valid_src": "val.de", "valid_tgt": "val.en",
    "test_src": "test2016.de", "test_tgt": "test2016.en",
}  # fmt: skip


@dataclass(frozen=True)
class Variant:
    norm: str
    position: str
    warmup: bool

    @property
    def name(self) -> str:
        return f"{self.norm}-{self.position}-{'warmup' if self.warmup else 'no-warmup'}"


FAILED_BLEU = 1.0  # a run below this test BLEU translates nothing: it failed to train
CORPORA = {"multi30k": "Multi30k de→en", "zh": "the embedded en→zh corpus"}


def base_run(corpus: str, config: Path, data: Path, flags: dict[str, dict[str, Any]]) -> Any:
    """The run config of ``corpus``: Multi30k's recipe (``config``) reading Multi30k from ``data``, or
    the embedded en→zh corpus's (the packaged recipe), with ``flags`` on top."""
    from vaswani.tasks import registry

    if corpus == "zh":
        return registry.configure("translation", flags)
    run = registry.configure("translation", flags, config=config)
    paths = {key: str((data / name).resolve()) for key, name in SPLITS.items()}
    return dataclasses.replace(run, data=run.data.replace(**paths))


def variant_run(base: Any, variant: Variant, steps: int, warmup: int, batch_tokens: int | None) -> Any:
    """``base`` with the variant's norm and positions, trained for ``steps`` steps of
    ``batch_tokens`` (None: the recipe's) on one thread, with ``warmup`` steps of warmup or none."""
    train = base.train.replace(
        max_steps=steps, batch_tokens=batch_tokens or base.train.batch_tokens, max_minutes=None,
        warmup_steps=warmup if variant.warmup else 0, eval_every=max(1, steps // 8),
        eval_sentences=100, checkpoint_every=None, threads=1,
    )  # fmt: skip
    from vaswani.aliases import COMBINED_NORMS

    kind, placement = COMBINED_NORMS[variant.norm]
    model = base.model.replace(norm=kind, norm_placement=placement, position=variant.position)
    return dataclasses.replace(base, model=model, train=train)


def unigram_loss(tokenizer: Any, train: list[str], valid: list[str]) -> float:
    """Cross-entropy (nats per token, EOS included) of the valid targets under the add-one
    smoothed unigram distribution of the training targets: the loss of a model that ignores
    the source and the context."""
    counts: Counter[int] = Counter()
    for ids in tokenizer.encode_batch(train):
        counts.update([*ids, tokenizer.eos_id])
    total, vocab = sum(counts.values()), tokenizer.vocab_size
    nll, n = 0.0, 0
    for ids in tokenizer.encode_batch(valid):
        for token in [*ids, tokenizer.eos_id]:
            nll -= math.log((counts[token] + 1) / (total + vocab))
            n += 1
    return nll / n


def train_variant(run: Any, variant: Variant, out: Path) -> dict[str, Any]:
    """Train one variant in ``out / variant.name``; its row of the table."""
    from vaswani.errors import VaswaniError
    from vaswani.pipelines.translation import Translator
    from vaswani.plots import read_train_log
    from vaswani.tasks.translation import evaluate_split, load_data

    run_dir = out / variant.name
    started = time.perf_counter()
    row: dict[str, Any] = {"variant": variant, "error": ""}
    try:
        from vaswani.tasks.translation import train_translation

        metrics, translator, data = train_translation(run, run_dir, quiet=True)
        row["valid_loss"] = metrics["valid_loss"]
    except VaswaniError as exc:  # stopped on non-finite losses
        row["error"], row["valid_loss"] = str(exc).split(";")[0], math.nan
        translator, data = Translator.load(run_dir), load_data(run.data)
    row["bleu"] = evaluate_split(translator, data.test)["bleu"]
    row["unigram_loss"] = unigram_loss(
        translator.tgt_tok, [t for _, t in data.train], [t for _, t in data.valid]
    )
    row["failed"] = (
        bool(row["error"]) or not row["valid_loss"] < row["unigram_loss"] or row["bleu"] < FAILED_BLEU
    )
    log = read_train_log(run_dir / "train_log.csv")
    evaluated = [i for i, loss in enumerate(log["valid_loss"]) if math.isfinite(loss)]  # not train rows
    row["curve"] = ([log["step"][i] for i in evaluated], [log["valid_loss"][i] for i in evaluated])
    row["minutes"] = (time.perf_counter() - started) / 60
    return row


def table(rows: list[dict[str, Any]], corpus: str, run: Any, warmup: int, command: str, wall: float) -> str:
    """The table of ``rows``, trained on ``corpus`` as ``run`` says (a variant's run config)."""
    unigram, m, t = rows[0]["unigram_loss"], run.model, run.train
    model = "`configs/multi30k.yaml`" if corpus == "multi30k" else "`vaswani train translation`"
    test = "test2016, sacreBLEU cased (13a)" if corpus == "multi30k" else "the test split, sacreBLEU (tok zh)"
    lines = [
        f"# Ablations: norm placement × positions × warmup on {CORPORA[corpus]}",
        "",
        f"Written by `{command}` ({time.strftime('%Y-%m-%d')}, {wall:.0f} minutes in all, "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end).",
        "",
        f"Each run: the model of {model} ({m.n_encoder_layers} + {m.n_decoder_layers} layers, "
        f"{m.d_model} dimensions), {t.max_steps} optimizer steps of {t.batch_tokens} padded tokens per "
        f"side (the same batches in the same order), one thread, peak lr {t.lr:g}, linear warmup over "
        f"{warmup} steps or none, then cosine decay to 0. "
        f"BLEU: greedy decoding of {test}. Valid loss: cross-entropy per "
        "target token on the whole valid split after the last step. Failed: training stopped on "
        f"non-finite losses, the valid loss is no better than the unigram baseline ({unigram:.3f}), "
        f"or the test BLEU is below {FAILED_BLEU:g} (it translates nothing).",
        "",
        "| norm | positions | warmup | test BLEU | valid loss | failed | minutes |",
        "| --- | --- | --- | ---: | ---: | --- | ---: |",
    ]
    for row in rows:
        v = row["variant"]
        failed = "yes" + (f" ({row['error']})" if row["error"] else "") if row["failed"] else "no"
        lines.append(
            f"| {v.norm} | {v.position} | {'yes' if v.warmup else 'no'} | {row['bleu']:.2f} | "
            f"{row['valid_loss']:.3f} | {failed} | {row['minutes']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def curves(rows: list[dict[str, Any]], corpus: str, out_png: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2), dpi=120, layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    styles = dict(zip(POSITIONS, ("-", "--", ":"), strict=True))
    colors = dict(zip(NORMS, ("C0", "C1", "C2"), strict=True))
    for ax, warm in zip(axes, (True, False), strict=True):
        for row in rows:
            v = row["variant"]
            if v.warmup == warm:
                steps, losses = row["curve"]
                ax.plot(
                    steps, losses, styles[v.position], color=colors[v.norm], label=f"{v.norm}, {v.position}"
                )
        ax.axhline(rows[0]["unigram_loss"], color="grey", linewidth=0.8, label="unigram baseline")
        ax.set_title("with warmup" if warm else "without warmup")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("valid loss (nats per token)")
    axes[1].legend(fontsize=7, ncol=2)
    fig.suptitle(f"{CORPORA[corpus]}: norm placement × positions × warmup", fontsize=10)
    fig.savefig(out_png)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps of each run")
    parser.add_argument(
        "--warmup", type=int, help="warmup steps of the runs with warmup (default: steps / 4)"
    )
    parser.add_argument("--corpus", choices=CORPORA, default="multi30k", help="what every run trains on")
    parser.add_argument(
        "--batch-tokens", type=int, help="padded tokens per side a step (1500 on Multi30k; zh: its recipe's)"
    )
    parser.add_argument("--layers", type=int, help="layers of each stack (default: the recipe's)")
    parser.add_argument("--lr", type=float, help="peak learning rate (default: the recipe's)")
    parser.add_argument("--jobs", type=int, default=2, help="runs trained side by side (one thread each)")
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "multi30k.yaml")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "multi30k")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "ablations", help="run directories")
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--norms", nargs="+", choices=NORMS, default=NORMS)
    parser.add_argument("--positions", nargs="+", choices=POSITIONS, default=POSITIONS)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 steps on a tiny corpus")
    args = parser.parse_args(argv)
    scratch = tempfile.TemporaryDirectory()
    if args.quick:  # Multi30k's file names over the tiny corpus of benchmarks/quick.py
        import quick

        folder = Path(scratch.name)
        args.data, args.out, args.results = folder / "data", folder / "runs", folder / "results"
        args.data.mkdir()
        for seed, split in enumerate(("train", "val", "test2016")):
            quick.parallel_corpus(
                args.data, 120 if split == "train" else 16, (f"{split}.de", f"{split}.en"), seed
            )
        args.steps, args.jobs, args.norms, args.positions = 2, 1, ["pre_ln"], ["sinusoidal"]
    if args.corpus == "multi30k" and not (args.data / SPLITS["src"]).is_file():
        print(f"ablations: {args.data}: no Multi30k here (give --data)", file=sys.stderr)
        return 2
    if args.out.exists() and any(args.out.iterdir()):
        print(
            f"ablations: {args.out}: already exists and is not empty; choose another --out", file=sys.stderr
        )
        return 2
    variants = [Variant(n, p, w) for w, n, p in itertools.product((True, False), args.norms, args.positions)]
    flags: dict[str, dict[str, Any]] = {"model": {}, "train": {}}
    if args.layers is not None:
        flags["model"]["n_layers"] = args.layers
    if args.lr is not None:
        flags["train"]["lr"] = args.lr
    base = base_run(args.corpus, args.config, args.data, flags)
    if args.batch_tokens is None and args.corpus == "multi30k":
        args.batch_tokens = 1500
    warmup = args.steps // 4 if args.warmup is None else args.warmup
    started = time.perf_counter()
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [
            pool.submit(
                train_variant, variant_run(base, v, args.steps, warmup, args.batch_tokens), v, args.out
            )
            for v in variants
        ]
        rows = []
        for future in futures:
            rows.append(future.result())
            v = rows[-1]["variant"]
            print(
                f"{v.name}: BLEU {rows[-1]['bleu']:.2f}, valid loss {rows[-1]['valid_loss']:.3f}", flush=True
            )
    args.results.mkdir(parents=True, exist_ok=True)
    given = argv if argv is not None else sys.argv[1:]
    # Paths as the table records them: relative to the repository, not one machine's folders.
    shown = [os.path.relpath(a, ROOT) if os.path.isabs(a) else a for a in given]
    command = " ".join(["python benchmarks/ablations.py", *shown])
    run = variant_run(base, variants[0], args.steps, warmup, args.batch_tokens)
    text = table(rows, args.corpus, run, warmup, command, (time.perf_counter() - started) / 60)
    name = "ablations" if args.corpus == "multi30k" else f"ablations_{args.corpus}"
    (args.results / f"{name}.md").write_text(text, encoding="utf-8")
    curves(rows, args.corpus, args.results / f"{name}.png")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
