"""Translation: the task adapter (data, loss, metrics), its training and its hooks; the translator
that uses a run is :mod:`vaswani.pipelines.translation`'s.

Training data comes from the user's parallel files or, by default, from the
embedded English→Chinese grammar corpus (:mod:`vaswani.data.grammar`).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from vaswani.config import RunConfig, padded_vocab_size
from vaswani.data import grammar, hf_datasets
from vaswani.data.batching import Seq2SeqBatch, seq2seq_batch, token_buckets
from vaswani.data.config import ParallelData
from vaswani.data.readers import read_parallel, read_tsv_pairs
from vaswani.data.splits import hold_out
from vaswani.data.words import train_source_words
from vaswani.errors import ConfigError, DataError
from vaswani.generation.config import GREEDY, DecodingConfig, describe_decoding
from vaswani.io import atomic_write_text
from vaswani.layers.embedding import Embeddings
from vaswani.layers.quantize import prepare_weights
from vaswani.metrics import bleu, chrf, is_cjk, perplexity, translation_scores
from vaswani.models.rnn import RNNTranslator
from vaswani.models.transformer import Transformer
from vaswani.pipelines.common import on_model_device
from vaswani.pipelines.translation import (
    SRC_TOKENIZER,
    TASK,
    TGT_TOKENIZER,
    Translator,
    check_vocab,
    translation_model,
)
from vaswani.recipes import Sections
from vaswani.rundir import RunDir
from vaswani.runtime import Resolved
from vaswani.tasks.evaluation import Evaluation, Report
from vaswani.tasks.finetune import refuse_model_flags
from vaswani.tasks.mrt import MinimumRiskTask, initialised
from vaswani.tasks.settings import absolute, validated
from vaswani.tasks.word_vectors import embedding_rows, sized_for, with_word_vectors
from vaswani.tokenizer import TextTokenizer
from vaswani.training.distributed import world
from vaswani.training.losses import label_smoothed_nll
from vaswani.training.progress import Stage
from vaswani.training.trainer import fit_run

Pairs = list[tuple[str, str]]
DEFAULT_CORPUS = "the default corpus"
PATH_FIELDS = (
    "src", "tgt", "valid_src", "valid_tgt", "test_src", "test_tgt", "pairs", "word_vectors", "init",
    "dataset",
)  # fmt: skip
EMPTY = "(empty)"
"""How an empty translation is displayed to a person; a file or a pipe keeps an empty line."""
UNDERTRAINED = "vaswani: note: an empty translation: the model may be undertrained (train it longer)"


class EmptyTranslations:
    """Shows translations to a person: an empty one as :data:`EMPTY` where ``display`` (else as
    it is, for a file or a pipe), and, at the first one, :data:`UNDERTRAINED` on standard error."""

    def __init__(self, display: bool = True) -> None:
        self.display = display
        self.noted = False

    def __call__(self, translation: str) -> str:
        """``translation`` as shown."""
        if translation:
            return translation
        if not self.noted:
            print(UNDERTRAINED, file=sys.stderr)
            self.noted = True
        return EMPTY if self.display else translation


EXAMPLES = [
    "Tom chases Jerry",
    "Tom chased Jerry yesterday",
    "Does Jerry like the small cat?",
    "The dog that Tom saw is eating rice",
    "Mary did not buy three books",
]


@dataclass
class TranslationData:
    """Sentence pairs, and where they came from (for error messages)."""

    train: Pairs
    valid: Pairs
    test: Pairs
    train_name: str = "train"
    valid_name: str = "valid"


def load_data(spec: ParallelData, quiet: bool = True) -> TranslationData:
    """Read the data a run's ``data`` config section describes (the default corpus generated with
    a progress line on standard error unless ``quiet``)."""
    if spec.source == "default":
        n = spec.n_train + spec.n_valid + spec.n_test
        with Stage(f"generating {n:,} sentence pairs", n, quiet) as shown:
            corpus = grammar.default_corpus(spec.seed, spec.n_train, spec.n_valid, spec.n_test, shown)
        return TranslationData(corpus.train, corpus.valid, corpus.test, DEFAULT_CORPUS)
    if spec.source == "tsv":
        assert spec.pairs is not None  # DataConfig checks it
        try:
            train, valid, test = hold_out(
                read_tsv_pairs(spec.pairs, spec.columns), spec.n_valid, spec.n_test, spec.seed
            )
        except ValueError as exc:
            raise DataError(f"{spec.pairs}: {exc}") from None
        name = f"{spec.pairs} (train split)"
        return TranslationData(train, valid, test, name, f"{spec.pairs} (valid split)")
    if spec.source == "dataset":
        return dataset_pairs(spec)
    assert spec.src is not None and spec.tgt is not None  # DataConfig checks it
    train = read_parallel(spec.src, spec.tgt)
    valid, valid_name = None, spec.valid_src
    if spec.valid_src and spec.valid_tgt:
        valid = read_parallel(spec.valid_src, spec.valid_tgt)
    test: Pairs = []
    if spec.test_src and spec.test_tgt:
        test = read_parallel(spec.test_src, spec.test_tgt)
    return held_out(train, valid, test, spec.src, valid_name)


def held_out(
    train: Pairs, valid: Pairs | None, test: Pairs, name: str, valid_name: str | None
) -> TranslationData:
    """The data of ``train`` (named ``name``), ``valid`` (or else a tail of ``train``: a twentieth,
    1 to 1000 pairs) and ``test``."""
    if valid is None:
        cut = max(1, min(1000, len(train) // 20))
        train, valid = train[:-cut], train[-cut:]
        valid_name = f"{name} (held-out tail)"
        if not train:
            raise DataError(f"{name}: too few lines to hold out a validation split")
    return TranslationData(train, valid, test, name, valid_name or name)


def dataset_pairs(spec: ParallelData) -> TranslationData:
    """The sentence pairs of a Hugging Face dataset (:mod:`vaswani.data.hf_datasets`): its ``split``,
    its ``dev_split`` (or ``validation``; else a held-out tail, as of files) and its ``test`` split
    where it has one (and scores on another)."""
    assert spec.dataset is not None  # ParallelData checks it
    splits = hf_datasets.open_splits(spec.dataset)
    languages = None if spec.source_lang is None else (spec.source_lang, spec.target_lang or "")

    def pairs(split: str) -> Pairs:
        name = hf_datasets.split_name(spec.dataset, split)
        found = hf_datasets.split_of(splits, split, spec.dataset)
        return hf_datasets.sentence_pairs(found, name, spec.source_column, spec.target_column, languages)

    dev = hf_datasets.dev_split_name(splits, spec.dev_split, spec.dataset)
    test = pairs("test") if "test" in splits and "test" not in (spec.split, dev) else []
    name = hf_datasets.split_name(spec.dataset, spec.split)
    valid_name = None if dev is None else hf_datasets.split_name(spec.dataset, dev)
    return held_out(pairs(spec.split), None if dev is None else pairs(dev), test, name, valid_name)


def build_tokenizers(
    data: TranslationData, vocab_size: int, shared: bool, source_kind: str = "bpe", quiet: bool = True
) -> tuple[TextTokenizer, TextTokenizer]:
    """BPE on the training text: one vocabulary for both sides, or one per side (the source's
    word-level with ``source_kind`` "word"); a progress line on standard error unless ``quiet``."""
    with Stage(f"training tokenizers on {len(data.train):,} pairs", quiet=quiet):
        if shared:
            both = TextTokenizer.train_bpe([t for pair in data.train for t in pair], vocab_size)
            return both, both
        sources = [s for s, _ in data.train]
        word = source_kind == "word"
        src = (
            train_source_words(sources, vocab_size) if word else TextTokenizer.train_bpe(sources, vocab_size)
        )
        tgt = TextTokenizer.train_bpe([t for _, t in data.train], vocab_size)
        return src, tgt


def encode_pairs(
    pairs: Pairs, src_tok: TextTokenizer, tgt_tok: TextTokenizer, max_len: int, name: str
) -> list[tuple[list[int], list[int]]]:
    """Token ids of each pair; a sentence that does not fit ``max_len`` (with BOS/EOS)
    is refused with its line number."""
    src_ids = src_tok.encode_batch([s for s, _ in pairs])
    tgt_ids = tgt_tok.encode_batch([t for _, t in pairs])
    for line, (s, t) in enumerate(zip(src_ids, tgt_ids, strict=True), start=1):
        longest = max(len(s), len(t) + 1)
        if longest > max_len:
            raise DataError(
                f"{name}:{line}: sentence of {longest} tokens exceeds the model's max_len="
                f"{max_len}; shorten or drop the line, or raise --max-len"
            )
    return list(zip(src_ids, tgt_ids, strict=True))


class TranslationTask:
    """Teacher-forced label-smoothed cross-entropy; valid loss, BLEU and chrF."""

    batch_flag = "--batch-tokens"  # what to lower when a step runs out of memory

    def __init__(
        self, run: RunConfig, src_tok: TextTokenizer, tgt_tok: TextTokenizer, data: TranslationData
    ) -> None:
        self.src_tok, self.tgt_tok = src_tok, tgt_tok
        self.smoothing = run.train.label_smoothing
        self.bleu_tokenize = run.data.bleu_tokenize or "13a"
        self.pad_id = run.model.pad_id
        self._batches = self._batches_of(data.train, data.train_name, run)
        self._valid = self._batches_of(data.valid, data.valid_name, run)
        self._bleu_pairs = data.valid[: run.train.eval_sentences]

    def _batches_of(self, pairs: Pairs, name: str, run: RunConfig) -> list[Seq2SeqBatch]:
        encoded = encode_pairs(pairs, self.src_tok, self.tgt_tok, run.model.max_len, name)
        lengths = [max(len(s), len(t) + 1) for s, t in encoded]
        return [
            seq2seq_batch([encoded[i] for i in idx], self.tgt_tok.bos_id, self.tgt_tok.eos_id, self.pad_id)
            for idx in token_buckets(lengths, run.train.batch_tokens, run.train.seed)
        ]

    def train_batches(self) -> list[Seq2SeqBatch]:
        return self._batches

    def loss(self, model: nn.Module, batch: Seq2SeqBatch) -> tuple[Tensor, int]:
        logits = model(batch.src, batch.tgt_in)
        return label_smoothed_nll(logits, batch.tgt_out, self.pad_id, self.smoothing), batch.n_tokens

    def batch_tokens(self, batch: Seq2SeqBatch) -> int:
        return batch.n_src_tokens + batch.n_tokens

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        total, count = 0.0, 0
        for batch in (on_model_device(model, b) for b in self._valid):
            logits = model(batch.src, batch.tgt_in)
            total += float(label_smoothed_nll(logits, batch.tgt_out, self.pad_id, 0.0))
            count += batch.n_tokens
        valid_loss = total / max(1, count)
        assert isinstance(model, (Transformer, RNNTranslator))
        translator = Translator(model, self.src_tok, self.tgt_tok, self.bleu_tokenize)
        hyps = translator.translate([s for s, _ in self._bleu_pairs])
        refs = [t for _, t in self._bleu_pairs]
        return {
            "valid_loss": valid_loss,
            "valid_ppl": perplexity(valid_loss),
            "valid_bleu": bleu(hyps, refs, self.bleu_tokenize).value,
            "valid_chrf": chrf(hyps, refs).value,
        }


def train_translation(
    run: RunConfig, run_dir: Path, resume: bool = False, quiet: bool = False, device: Resolved = None
) -> tuple[dict[str, Any], Translator, TranslationData]:
    """Train a translation run in ``run_dir`` (or, with ``resume``, continue it: see
    :func:`vaswani.tasks.lifecycle.resume`); return metrics, translator and data."""
    rows, start = None, None
    if not resume and run.data.init is not None:  # type: ignore[union-attr]
        run, src_tok, tgt_tok, start = initialised(run)
    data = load_data(run.data, quiet or not world().main)
    if resume:
        src_tok = TextTokenizer.load(run_dir / SRC_TOKENIZER)
        tgt_tok = TextTokenizer.load(run_dir / TGT_TOKENIZER)
    elif start is None:
        src_tok, tgt_tok = build_tokenizers(
            data, run.data.vocab_size, run.data.shared_vocab, run.data.tokenizer, quiet or not world().main
        )
        run = fit_vocab(run, src_tok, tgt_tok, data)
        if run.data.word_vectors is not None:
            rows = embedding_rows(run.data, src_tok, run.model.d_model)
            run = RunConfig(run.task, sized_for(run.model, rows), run.train, run.data)
            if not quiet:
                print(rows.report)
    check_vocab(run.model, src_tok, tgt_tok, run_dir)
    task: TranslationTask | MinimumRiskTask = TranslationTask(run, src_tok, tgt_tok, data)
    if run.data.objective == "mrt":  # type: ignore[union-attr]
        task = MinimumRiskTask(task, run.data)  # type: ignore[arg-type]

    def save_tokenizers(folder: Path) -> None:
        src_tok.save(folder / SRC_TOKENIZER)
        tgt_tok.save(folder / TGT_TOKENIZER)

    fresh = lambda: model_of(run) if start is None else start  # noqa: E731 (--init: the trained run's)
    build = with_word_vectors(fresh, source_embedding, rows, run.data.freeze_embeddings)
    metrics, model = fit_run(run, run_dir, task, build, save_tokenizers, resume, quiet, device=device)
    assert isinstance(model, (Transformer, RNNTranslator))
    return metrics, Translator(model, src_tok, tgt_tok, run.data.bleu_tokenize or "13a"), data


def source_embedding(model: nn.Module) -> Embeddings:
    """The source embedding of a translator (the one that word vectors fill)."""
    assert isinstance(model, Transformer)
    return model.src_embed


def fit_vocab(
    run: RunConfig, src_tok: TextTokenizer, tgt_tok: TextTokenizer, data: TranslationData
) -> RunConfig:
    """Size the embeddings to the trained tokenizers, rounded up to a multiple of 64
    (aligned matrix shapes), and pick BLEU's tokenizer from the target language."""

    model = run.model.replace(
        src_vocab_size=padded_vocab_size(src_tok.vocab_size),
        tgt_vocab_size=padded_vocab_size(tgt_tok.vocab_size),
    )
    if model.tie_embeddings == "all" and src_tok is not tgt_tok:
        raise ConfigError(
            "config field 'model.tie_embeddings': 'all' needs one shared vocabulary "
            "(--shared-vocab); use 'output' with separate vocabularies"
        )
    tokenize = run.data.bleu_tokenize or ("zh" if is_cjk("".join(t for _, t in data.train[:200])) else "13a")
    return RunConfig(run.task, model, run.train, run.data.replace(bleu_tokenize=tokenize))


def evaluate_split(
    translator: Translator,
    pairs: Pairs,
    batch_size: int = 64,
    quiet: bool = True,
    decoding: DecodingConfig = GREEDY,
) -> dict[str, Any]:
    """BLEU (cased and lowercased) and chrF, sacrebleu's with their signatures, of the
    translations of ``pairs`` decoded as ``decoding`` says (greedy by default; see
    :meth:`Translator.translate`)."""
    sources = [s for s, _ in pairs]
    hyps = translator.translate(sources, decoding, batch_size, progress=not quiet)
    refs = [t for _, t in pairs]
    return translation_scores(hyps, refs, translator.bleu_tokenize)


def write_test_metrics(
    run_dir: Path, metrics: dict[str, Any], scores: dict[str, Any], split: str
) -> dict[str, Any]:
    """Add held-out scores to ``metrics.json`` (written atomically) and return the whole."""
    merged = {
        **metrics,
        **{k: v for k, v in scores.items() if k != "hypotheses"},
        "bleu_split": split,
    }
    RunDir(run_dir).write_metrics(merged)
    return merged


def model_of(run: RunConfig) -> Transformer | RNNTranslator:
    """The (untrained) model of a translation run: a Transformer, or with ``--arch rnn`` the RNN."""
    return translation_model(run.model)


def describe_scores(scores: dict[str, Any]) -> str:
    return f"BLEU {scores['bleu']:.2f} (lowercased {scores['bleu_lowercase']:.2f})  chrF {scores['chrf']:.2f}"


def evaluate_run(run_dir: Path, request: Evaluation) -> Report:
    """BLEU and chrF of a translation run on ``request.src``/``ref``, or on its test split (else valid);
    the hypotheses go to ``request.out`` (default ``RUN_DIR/hypotheses.NAME``). The report's lines."""
    if request.text:
        raise ConfigError(
            "a translation run is evaluated on --src and --ref, or its own test split, not --text"
        )
    if (request.src is None) != (request.ref is None):
        raise ConfigError("--src and --ref go together")
    translator = Translator.load(run_dir, request.device)
    prepare_weights(translator.model, request.quantize, request.dtype)
    if request.src is not None and request.ref is not None:
        pairs, name = read_parallel(request.src, request.ref), request.src.name
    else:
        data = load_data(RunDir(run_dir).read_config(TASK, ParallelData).data)  # type: ignore[arg-type]
        pairs, name = (data.test, "test") if data.test else (data.valid, "valid")
    decoding = request.decoding or GREEDY
    scores = evaluate_split(translator, pairs, batch_size=request.batch_size, quiet=False, decoding=decoding)
    out = request.out or run_dir / f"hypotheses.{name}"
    atomic_write_text(Path(out), "\n".join(scores.pop("hypotheses")) + "\n")
    print(f"vaswani: {translator.weights_note}", file=sys.stderr)  # after: a refusal stays one line
    return Report(
        [
            f"{name}: {describe_scores(scores)}  ({len(pairs)} sentences, {describe_decoding(decoding)})",
            f"  {scores['bleu_signature']}\n  {scores['bleu_lowercase_signature']}\n"
            f"  {scores['chrf_signature']}\nhypotheses: {out}",
        ]
    )


def recipe(flags: Sections) -> str:
    """The embedded default job, or the recipe for the user's files once they are given; the RNN's
    own of each with ``--arch rnn`` (``translation-rnn``, ``translation-files-rnn``), minimum risk
    training's with ``--objective mrt`` (``translation-mrt``, ``translation-files-mrt``)."""
    data = flags.get("data", {})
    name = "translation-files" if {"src", "pairs", "dataset"} & set(data) else "translation"
    if data.get("objective") == "mrt":
        return f"{name}-mrt"
    return f"{name}-rnn" if flags.get("model", {}).get("arch") == "rnn" else name


def configure(
    sections: Sections,
    flags: Sections,
    source: str,
    task: str = TASK,
    data_class: type[ParallelData] = ParallelData,
    paths: tuple[str, ...] = PATH_FIELDS,
) -> RunConfig:
    """A translation run (or one of ``task``, with its data config ``data_class`` and ``paths``): files
    given as flags pick their source (``--pairs``: tsv), one shared vocabulary ties all three
    embeddings unless a tie is given, paths are stored absolute, and the best weights by validation
    BLEU are kept (``train.select_by``: what the run is scored by, computed at each evaluation)."""
    given = flags.get("data", {})
    if ("src" in given) != ("tgt" in given):
        raise ConfigError("--src and --tgt go together")
    if ("valid_src" in given) != ("valid_tgt" in given):
        raise ConfigError("--valid-src and --valid-tgt go together")
    if "pairs" in given and "src" in given:
        raise ConfigError("--pairs replaces --src and --tgt: give one or the other")
    if "dataset" in given and ("src" in given or "pairs" in given):
        raise ConfigError("--dataset replaces --src and --tgt (and --pairs): give one or the other")
    if given.get("init") is not None:
        refuse_model_flags(flags)
    model, data = sections.setdefault("model", {}), sections.setdefault("data", {})
    sections.setdefault("train", {}).setdefault("select_by", "bleu")  # the metric the run is scored by
    if "pairs" in given or "src" in given:
        data["source"] = "tsv" if "pairs" in given else "files"
    if "dataset" in given:
        data["source"] = "dataset"
    if model.get("arch", "encoder_decoder") not in ("encoder_decoder", "rnn"):
        raise ConfigError(
            f"{source}: config field 'model.arch': a translator is 'encoder_decoder' or 'rnn', "
            f"got {model['arch']!r}"
        )
    if model.get("arch") == "rnn" and (data.get("word_vectors") is not None or data.get("freeze_embeddings")):
        raise ConfigError(f"{source}: config field 'data.word_vectors': fills a Transformer's embedding")
    if data.get("shared_vocab"):
        model.setdefault("tie_embeddings", "all")
    else:
        model.setdefault("tie_embeddings", "output")
    absolute(data, paths)
    return validated(task, sections, data_class, source)


def finish(
    result: tuple[dict[str, Any], Translator, TranslationData], run_dir: Path, started: float, quiet: bool
) -> list[str]:
    """After training: greedy BLEU and chrF on the test split (the valid one without it), added to
    ``metrics.json``, and the report's lines (with example translations of the default corpus)."""
    metrics, translator, data = result
    pairs, split = (data.test, "test") if data.test else (data.valid, "valid")
    scores = evaluate_split(translator, pairs, quiet=quiet)
    metrics = write_test_metrics(run_dir, metrics, scores, split)
    lines = [
        f"\n{split} {describe_scores(scores)}  ({len(pairs)} sentences, greedy)",
        f"  {scores['bleu_signature']}",
        f"valid loss {metrics['valid_loss']:.3f}, {metrics['steps']} steps, "
        f"{metrics['tokens_per_second']:,.0f} tokens/s, total {time.perf_counter() - started:.0f} s",
    ]
    if data.train_name == DEFAULT_CORPUS:
        lines.append("")
        shown = EmptyTranslations()
        for sentence, translation in zip(EXAMPLES, translator.translate(EXAMPLES), strict=True):
            lines.append(f"  {sentence}  →  {shown(translation)}")
    example = EXAMPLES[0] if data.train_name == DEFAULT_CORPUS else pairs[0][0]
    lines.append(f'\nrun directory: {run_dir}\n  vaswani translate {run_dir} "{example}"')
    return lines
