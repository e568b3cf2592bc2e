"""Translation speed of vaswani against CTranslate2 on the same weights, in fp32 and int8.

CTranslate2 (OpenNMT's C++ engine) is what people deploy Marian translators with on CPUs. Here it
runs the very weights vaswani runs: each model is a vaswani run directory, converted by
``vaswani export-ctranslate2`` (CTranslate2's Marian loader, :mod:`vaswani.interop.ct2`), and the
same sources are translated by

- vaswani fp32 (``translate_beam_ids`` / ``translate_ids``, what ``Translator`` runs),
- vaswani int8 (``--quantize int8``: :mod:`vaswani.layers.quantize`),
- CTranslate2 fp32 and int8 (``compute_type`` at load), each in a process of its own that times
  its passes (``ct2_engine.py``: in torch's process the two engines' OpenMP threads slow each
  other down),

at beam 4 with batches of 32, greedy with batches of 32, and greedy one sentence at a time (the
first ``--batch1`` sources). Both engines get the same batches (sources sorted by length), the same
budget (the Translator's rule: 2·|x| + 10 new tokens at the batch's longest source, capped by the
model's max_len), the same length penalty (|y|^1 for beam search), the same threads, and never
generate the suppressed ids (Marian's ``<pad>``). Passes are interleaved (vaswani, CTranslate2,
CTranslate2, vaswani, ...) after one warm-up pass each; the table gives target tokens per second
(the tokens of each engine's translations, ``</s>`` included) and vaswani's rate over
CTranslate2's at the same precision, with how many translations are identical to CTranslate2
fp32's and the BLEU of each (the trained model, against its references).

Two models:

- ``trained``: a translation run (``--run RUN_DIR``), translating its own test split; by default the
  Multi30k recipe (``configs/multi30k.yaml``: 3 + 3 layers, d_model 256, 8 heads, FFN 1024, a shared
  vocabulary of 8,000 BPE pieces, German → English) trained here for ``--minutes`` minutes (12),
  translating test2016, or, without ``../shared/data/multi30k`` (and with ``--quick``), the embedded
  English → Chinese job (2 + 2 layers, d_model 128) trained for ``--steps`` steps;
- ``base``: the transformer-base shape (6+6 layers, d_model 512, 8 heads, FFN 2048, a shared Marian
  vocabulary of 8,000 BPE pieces trained on Multi30k's German, whose test2016 it translates; without
  ``../shared/data/multi30k``, the trained model's sources) with random weights drawn as
  ``marian_speed.py`` draws them, for speed only (``--no-base`` skips it).

    python benchmarks/ct2_speed.py                 # both models (over an hour on 2 cores, --compile)
    python benchmarks/ct2_speed.py --run runs/zh --no-base
    python benchmarks/ct2_speed.py --quick         # smoke run: a tiny trained model, 16 sentences (seconds)
    python benchmarks/ct2_speed.py --compile       # and vaswani's compiled decoding (--compile)

With ``--compile`` vaswani fp32 also decodes through its compiled graphs (``run_all.py`` asks for
it), and at batch 1 vaswani int8 too (its products of one or two rows from blocked int8 weights,
weight-only: ``vaswani.layers.kernels.blocked_product``), each against CTranslate2 at its precision.

Needs ``ctranslate2`` (the ``ctranslate2`` extra, or ``compare``); without it, one line and exit 0.
"""

from __future__ import annotations

import argparse
import copy
import functools
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml
from ct2_engine import CT2Process
from marian_speed import DATA, Setup, batches, budget, build_pair, marian_bpe, until_eos
from timing import available_cores, cpu_description, record

from vaswani.cli import main as vaswani
from vaswani.config import RunConfig, TrainConfig
from vaswani.data.config import ParallelData
from vaswani.generation.compiled import CompiledDecoding
from vaswani.generation.config import DecodingConfig
from vaswani.generation.seq2seq import translate_beam_ids, translate_ids
from vaswani.interop.common import save_run
from vaswani.layers.quantize import prepare_weights
from vaswani.metrics import bleu, is_cjk
from vaswani.models.transformer import Transformer
from vaswani.pipelines.translation import SRC_TOKENIZER, TGT_TOKENIZER, Translator
from vaswani.rundir import RunDir
from vaswani.tasks.translation import load_data
from vaswani.tokenizer import TextTokenizer

ROOT = Path(__file__).resolve().parents[1]
BEAM, ALPHA = 4, 1.0
BASE = {
    "d_model": 512, "encoder_layers": 6, "decoder_layers": 6, "encoder_attention_heads": 8,
    "decoder_attention_heads": 8, "encoder_ffn_dim": 2048, "decoder_ffn_dim": 2048,
    "max_position_embeddings": 256,
}  # fmt: skip
MODES = (("beam 4, batch 32", BEAM, 32), ("greedy, batch 32", 1, 32), ("greedy, batch 1", 1, 1))
TARGETS = {("beam 4, batch 32", "fp32"): ">= 1.0", ("beam 4, batch 32", "int8"): ">= 0.9",
           ("greedy, batch 1", "fp32"): ">= 0.8", ("beam 4, batch 32", "fp32, compiled"): ">= 1.0",
           ("greedy, batch 1", "fp32, compiled"): ">= 0.8"}  # fmt: skip
"""Issue 32's targets, vaswani / CTranslate2 at the same precision."""
Work = list[tuple[torch.Tensor, list[int]]]


@dataclass
class Model:
    """A model as both engines run it: vaswani's in fp32 and int8, CTranslate2's folder, the
    tokenizers, the sources (ids) and the references (None for random weights)."""

    name: str
    fp32: Transformer
    int8: Transformer
    ct2_folder: Path
    src_tok: TextTokenizer
    tgt_tok: TextTokenizer
    sources: list[list[int]]
    references: list[str] | None


def ct2_folder(run_dir: Path, out: Path) -> Path:
    """The run converted by ``vaswani export-ctranslate2``."""
    if vaswani(["export-ctranslate2", str(run_dir), str(out)]) != 0:
        sys.exit(f"export-ctranslate2 failed for {run_dir}")
    return out


Tokenizers = tuple[TextTokenizer, TextTokenizer]  # source, target


def with_int8(
    name: str, model: Transformer, run_dir: Path, folder: Path, tokenizers: Tokenizers,
    sources: list[list[int]], references: list[str] | None,
) -> Model:  # fmt: skip
    """The ``Model`` of a run: vaswani's fp32 model, an int8 copy and the CTranslate2 folder."""
    int8 = copy.deepcopy(model)
    prepare_weights(int8, "int8", None)
    folder = ct2_folder(run_dir, folder / f"{name}-ct2")
    return Model(name, model, int8, folder, *tokenizers, sources, references)


def multi30k_config(folder: Path) -> Path:
    """``configs/multi30k.yaml`` with its data paths (relative to the repository's root) made
    absolute, written into ``folder``: the run it trains reads them from anywhere."""
    config = yaml.safe_load((ROOT / "configs" / "multi30k.yaml").read_text(encoding="utf-8"))
    config["data"] = {
        key: str((ROOT / value).resolve()) if isinstance(value, str) and value.startswith("../") else value
        for key, value in config["data"].items()
    }
    path = folder / "multi30k.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def train_trained(args: argparse.Namespace, folder: Path) -> Path:
    """The default trained run, trained into ``folder``: the Multi30k recipe for ``--minutes``
    minutes where its data is (in a child process: the training's threads are its own), else (and
    with ``--quick``) the embedded job for ``--steps`` steps (a tiny shape with ``--quick``)."""
    run_dir = folder / "trained"
    if not args.quick and (DATA / "train.de").is_file() and (DATA / "test2016.de").is_file():
        recipe = ["--config", str(multi30k_config(folder)), "--max-minutes", f"{args.minutes:g}"]
        command = [sys.executable, "-m", "vaswani", "train", "translation", *recipe, "--out", str(run_dir)]
        if subprocess.run([*command, "--quiet"], check=False).returncode != 0:
            sys.exit("training the Multi30k recipe failed")
        return run_dir
    steps = "30" if args.quick else str(args.steps)
    shape = ["--d-model", "32", "--heads", "2", "--d-ff", "64", "--layers", "1"] if args.quick else []
    if vaswani(["train", "translation", "--out", str(run_dir), "--max-steps", steps, "--quiet", *shape]) != 0:
        sys.exit("training the embedded translation job failed")
    return run_dir


def trained_model(args: argparse.Namespace, folder: Path) -> Model:
    """The trained run (``--run``, else :func:`train_trained`'s), its test split."""
    run_dir = args.run or train_trained(args, folder)
    translator = Translator.load(run_dir, "cpu")
    data = load_data(RunDir(run_dir).read_config("translation", ParallelData).data)
    pairs = (data.test or data.valid)[: args.sentences or (16 if args.quick else 1000)]
    sources = translator.src_tok.encode_batch([src for src, _ in pairs])
    model = translator.model.eval()
    tokenizers = (translator.src_tok, translator.tgt_tok)
    return with_int8("trained", model, run_dir, folder, tokenizers, sources, [ref for _, ref in pairs])


def base_model(args: argparse.Namespace, folder: Path, texts: list[str]) -> Model:
    """The transformer-base shape with random weights (``marian_speed.build_pair``), as a run: its
    vocabulary trained on, and its sources taken from, Multi30k's German where it is there (else
    ``texts``)."""
    vocab = 8000
    train, test = DATA / "train.de", DATA / "test2016.de"
    if train.is_file() and test.is_file():
        tok = marian_bpe(train.read_text(encoding="utf-8").splitlines(), vocab)
        texts = test.read_text(encoding="utf-8").splitlines()
    else:
        tok = marian_bpe(texts, vocab)
    sources = tok.encode_batch(texts[: args.sentences or 1000])
    sample = batches(sources, 32, tok.pad_id)[0][0]
    ours, _ = build_pair(Setup(BASE, vocab, len(texts), len(sources), 32), tok, sample)
    run_dir = folder / "base"
    run_dir.mkdir()
    run = RunConfig("translation", ours.config, TrainConfig(), ParallelData(source="default"))
    save_run(run_dir, run, Transformer(ours.config), ours.state_dict())
    tok.save(run_dir / SRC_TOKENIZER)
    tok.save(run_dir / TGT_TOKENIZER)
    return with_int8("base", ours.eval(), run_dir, folder, (tok, tok), sources, None)


def vaswani_pass(
    model: Transformer, m: Model, work: Work, beam: int, compiled: CompiledDecoding | None = None
) -> dict[int, list[int]]:
    """vaswani's translation ids of every sentence (by index), batch by batch; the decoder's steps
    through ``compiled`` (static caches, ``torch.compile``) when given."""
    tok, out = m.tgt_tok, {}
    for src, index in work:
        limit = budget(src, m.src_tok.pad_id, model.config.max_len)
        if beam > 1:
            decoding = DecodingConfig(
                beam=beam,
                length_penalty_kind="simple",
                length_penalty=ALPHA,
                early_stopping=True,
                max_new_tokens=limit,
            )
            rows = translate_beam_ids(
                model, src, tok.bos_id, tok.eos_id, decoding, tok.suppressed_ids, compiled=compiled
            )
            ids = rows.tokens[:, 0].tolist()
        else:
            decoding = DecodingConfig(max_new_tokens=limit)
            found = translate_ids(
                model, src, tok.bos_id, tok.eos_id, decoding, suppress=tok.suppressed_ids, compiled=compiled
            )
            ids = found.tokens.tolist()
        for i, row in zip(index, ids, strict=True):
            out[i] = until_eos(row, tok.eos_id, tok.pad_id)
    return out


def ct2_pass(engine: CT2Process, m: Model, work: Work, beam: int) -> tuple[dict[int, list[int]], float]:
    """CTranslate2's translation ids of the same batches (its tokens mapped back to ids, ``</s>``
    appended where it ended one, as vaswani's rows keep it), and the seconds of its pass (timed
    in its own process: the tokens' conversion and the pipe are outside)."""
    src_vocab, tgt = m.src_tok.tokenizer, m.tgt_tok
    suppressed = [[tgt.tokenizer.id_to_token(i)] for i in tgt.suppressed_ids] or None
    tokens = [[[src_vocab.id_to_token(i) for i in m.sources[j]] for j in index] for _, index in work]
    limits = [budget(src, m.src_tok.pad_id, m.fp32.config.max_len) for src, _ in work]
    seconds, found = engine.translate(tokens, beam, ALPHA, limits, suppressed)
    out = {}
    for (_, index), hypotheses in zip(work, found, strict=True):
        for i, hypothesis in zip(index, hypotheses, strict=True):
            out[i] = [tgt.tokenizer.token_to_id(t) for t in hypothesis]
    return out, seconds


def timed(run: Callable[[], dict[int, list[int]]]) -> tuple[dict[int, list[int]], float]:
    """What ``run()`` returns and its seconds."""
    start = time.perf_counter()
    found = run()
    return found, time.perf_counter() - start


Pass = Callable[[], tuple[dict[int, list[int]], float]]  # translations, seconds


def race(
    ours: Pass, theirs: Pass, reps: int
) -> tuple[list[float], list[float], dict[int, list[int]], dict[int, list[int]]]:
    """Target tokens/s of ``reps`` passes of each (ours, theirs, theirs, ours, ...) after one warm-up
    pass each, and the translations of their last passes."""
    rates: tuple[list[float], list[float]] = ([], [])
    outputs: list[dict[int, list[int]]] = [{}, {}]

    def run(which: int, counted: bool = True) -> None:
        found, seconds = (ours, theirs)[which]()
        outputs[which] = found
        if counted:
            rates[which].append(sum(len(row) for row in found.values()) / seconds)

    with torch.inference_mode():
        run(0, counted=False)
        run(1, counted=False)
        for i in range(reps):
            for which in (0, 1) if i % 2 == 0 else (1, 0):
                run(which)
    return rates[0], rates[1], outputs[0], outputs[1]


def bench(m: Model, threads: int, reps: int, batch1: int, compile_steps: bool = False) -> list[list[str]]:
    """The rows of one model: per mode and precision, both engines' target tokens/s and their ratio;
    with ``compile_steps`` also vaswani's compiled decoding (``--compile``: its graphs made in the
    warm-up pass) against CTranslate2 fp32."""
    folder = m.ct2_folder
    with CT2Process(folder, "float32", threads) as fp32, CT2Process(folder, "int8", threads) as int8:
        return bench_engines(m, {"float32": fp32, "int8": int8}, reps, batch1, compile_steps)


def bench_engines(
    m: Model, engines: dict[str, CT2Process], reps: int, batch1: int, compile_steps: bool
) -> list[list[str]]:
    """:func:`bench`'s rows, CTranslate2's processes started."""
    rows = []
    for mode, beam, size in MODES:
        sources = m.sources if size > 1 else m.sources[:batch1]
        work = batches(sources, size, m.src_tok.pad_id)
        reference: dict[int, list[int]] = {}
        variants: list[tuple[str, Transformer, CT2Process, CompiledDecoding | None]] = [
            ("fp32", m.fp32, engines["float32"], None),
            ("int8", m.int8, engines["int8"], None),
        ]
        if compile_steps:
            variants.append(("fp32, compiled", m.fp32, engines["float32"], CompiledDecoding()))
            if size == 1:  # int8 compiled: its blocked weight-only products are for one or two rows
                variants.append(("int8, compiled", m.int8, engines["int8"], CompiledDecoding()))
        for precision, model, engine, compiled in variants:
            ours_rates, ct2_rates, ours, theirs = race(
                functools.partial(timed, functools.partial(vaswani_pass, model, m, work, beam, compiled)),
                functools.partial(ct2_pass, engine, m, work, beam),
                reps,
            )
            reference = reference or theirs  # CTranslate2 fp32's, the first
            same = sum(ours[i] == reference[i] for i in reference)
            a, b = statistics.median(ours_rates), statistics.median(ct2_rates)
            target = TARGETS.get((mode, precision), "")
            name = f"{m.name} model, {mode}, target tokens/s"
            record(name, precision, ours_rates, ct2_rates, "CTranslate2", target, ours_name="vaswani")
            cells = [
                m.name,
                mode,
                precision,
                f"{a:,.0f}",
                f"{b:,.0f}",
                f"{a / b:.2f}",
                f"{same}/{len(reference)}",
            ]
            if m.references is not None:
                refs = [m.references[i] for i in range(len(sources))]
                tokenize = "zh" if any(is_cjk(r) for r in refs[:20]) else "13a"
                for found in (ours, theirs):
                    hyps = [m.tgt_tok.decode(found[i]) for i in range(len(sources))]
                    cells.append(f"{bleu(hyps, refs, tokenize=tokenize).value:.2f}")
            else:
                cells += ["", ""]
            print(" | ".join(cells), flush=True)
            rows.append(cells)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="a tiny trained model, 16 sentences, 1 pass: a smoke run"
    )
    parser.add_argument(
        "--run", type=Path, help="a trained translation run (default: train the Multi30k recipe)"
    )
    parser.add_argument(
        "--minutes", type=float, default=12.0, help="minutes of the Multi30k recipe trained here (12)"
    )
    parser.add_argument(
        "--steps", type=int, default=1000, help="steps of the embedded job, without Multi30k (1000)"
    )
    parser.add_argument("--sentences", type=int, help="sources per model (1000; --quick 16)")
    parser.add_argument("--batch1", type=int, help="sources decoded one at a time (100; --quick 4)")
    parser.add_argument("--reps", type=int, help="timed passes per engine (3; --quick 1)")
    parser.add_argument("--threads", type=int, help="threads of both engines (default: all cores)")
    parser.add_argument("--no-base", action="store_true", help="skip the transformer-base shape")
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also vaswani's compiled decoding (torch.compile on static caches): fp32, and int8 at batch 1",
    )
    args = parser.parse_args(argv)
    try:
        import ctranslate2
    except ImportError:
        print("skipped: ctranslate2 is not installed (pip install -e '.[ctranslate2]')")
        return
    threads = args.threads or available_cores()
    torch.set_num_threads(threads)
    reps, batch1 = args.reps or (1 if args.quick else 3), args.batch1 or (4 if args.quick else 100)
    print(
        f"{cpu_description()}; torch {torch.__version__}, ctranslate2 {ctranslate2.__version__}, "
        f"{threads} threads",
        flush=True,
    )
    header = [
        "model",
        "decoding",
        "precision",
        "vaswani tokens/s",
        "CTranslate2 tokens/s",
        "vaswani/CT2",
        "same ids as CT2 fp32",
        "BLEU vaswani",
        "BLEU CT2",
    ]
    print(" | ".join(header), flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trained = trained_model(args, folder)
        rows += bench(trained, threads, reps, batch1, args.compile)
        if not (args.no_base or args.quick):  # a smoke run: the trained model only
            texts = [trained.src_tok.decode(ids) for ids in trained.sources]
            base = base_model(args, folder, texts)
            rows += bench(base, threads, reps, batch1, args.compile)
    print("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for cells in rows:
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
