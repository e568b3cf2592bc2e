"""Translation: the task adapter (data, loss, metrics) and the translator that uses a run.

Training data comes from the user's parallel files or, by default, from the
embedded English→Chinese grammar corpus (:mod:`vaswani.data.grammar`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import Tensor, nn
from tqdm import tqdm

from vaswani.config import ModelConfig, RunConfig, padded_vocab_size
from vaswani.data import grammar
from vaswani.data.batching import Seq2SeqBatch, pad, seq2seq_batch, token_buckets
from vaswani.data.config import ParallelData
from vaswani.data.readers import read_parallel, read_tsv_pairs
from vaswani.data.splits import hold_out
from vaswani.errors import ConfigError, DataError
from vaswani.generation.config import GREEDY, DecodingConfig, describe_decoding
from vaswani.generation.seq2seq import translate_beam_ids, translate_ids
from vaswani.metrics import bleu, chrf, is_cjk, perplexity
from vaswani.models.transformer import Transformer
from vaswani.recipes import Sections
from vaswani.rundir import RunDir
from vaswani.tasks.evaluation import Evaluation
from vaswani.tasks.settings import absolute, validated
from vaswani.tokenizer import TextTokenizer
from vaswani.training.losses import label_smoothed_nll
from vaswani.training.trainer import fit_run

TASK = "translation"
SRC_TOKENIZER, TGT_TOKENIZER = "src_tokenizer.json", "tgt_tokenizer.json"
Pairs = list[tuple[str, str]]
DEFAULT_CORPUS = "the default corpus"
PAPER_BEAM = DecodingConfig(beam=4)  # the paper's beam search: beam 4, GNMT length penalty alpha 0.6
PATH_FIELDS = ("src", "tgt", "valid_src", "valid_tgt", "test_src", "test_tgt", "pairs")
EXAMPLES = [
    "Tom chases Jerry",
    "Tom chased Jerry yesterday",
    "Does Jerry like the small cat?",
    "The dog that Tom saw is eating rice",
    "Mary did not buy three books",
]
T = TypeVar("T")


@dataclass
class TranslationData:
    """Sentence pairs, and where they came from (for error messages)."""

    train: Pairs
    valid: Pairs
    test: Pairs
    train_name: str = "train"
    valid_name: str = "valid"


def load_data(spec: ParallelData) -> TranslationData:
    """Read the data a run's ``data`` config section describes."""
    if spec.source == "default":
        corpus = grammar.default_corpus(
            seed=spec.seed, n_train=spec.n_train, n_valid=spec.n_valid, n_test=spec.n_test
        )
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
    assert spec.src is not None and spec.tgt is not None  # DataConfig checks it
    train = read_parallel(spec.src, spec.tgt)
    if spec.valid_src and spec.valid_tgt:
        valid = read_parallel(spec.valid_src, spec.valid_tgt)
        valid_name = spec.valid_src
    else:
        cut = max(1, min(1000, len(train) // 20))
        train, valid = train[:-cut], train[-cut:]
        valid_name = f"{spec.src} (held-out tail)"
        if not train:
            raise DataError(f"{spec.src}: too few lines to hold out a validation split")
    test: Pairs = []
    if spec.test_src and spec.test_tgt:
        test = read_parallel(spec.test_src, spec.test_tgt)
    return TranslationData(train, valid, test, spec.src, valid_name)


def build_tokenizers(
    data: TranslationData, vocab_size: int, shared: bool
) -> tuple[TextTokenizer, TextTokenizer]:
    """BPE on the training text: one vocabulary for both sides, or one per side."""
    if shared:
        both = TextTokenizer.train_bpe([t for pair in data.train for t in pair], vocab_size)
        return both, both
    src = TextTokenizer.train_bpe([s for s, _ in data.train], vocab_size)
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
        for batch in self._valid:
            logits = model(batch.src, batch.tgt_in)
            total += float(label_smoothed_nll(logits, batch.tgt_out, self.pad_id, 0.0))
            count += batch.n_tokens
        valid_loss = total / max(1, count)
        assert isinstance(model, Transformer)
        translator = Translator(model, self.src_tok, self.tgt_tok, self.bleu_tokenize)
        hyps = translator.translate([s for s, _ in self._bleu_pairs])
        refs = [t for _, t in self._bleu_pairs]
        return {
            "valid_loss": valid_loss,
            "valid_ppl": perplexity(valid_loss),
            "valid_bleu": bleu(hyps, refs, self.bleu_tokenize).value,
            "valid_chrf": chrf(hyps, refs).value,
        }


class Translator:
    """A trained translation model with its tokenizers: ``Translator.load(run_dir).translate([...])``."""

    def __init__(
        self,
        model: Transformer,
        src_tok: TextTokenizer,
        tgt_tok: TextTokenizer,
        bleu_tokenize: str = "13a",
    ) -> None:
        self.model, self.src_tok, self.tgt_tok = model, src_tok, tgt_tok
        self.bleu_tokenize = bleu_tokenize

    @classmethod
    def load(cls, run_dir: str | Path) -> Translator:
        folder = RunDir(run_dir)
        run = folder.read_config(TASK, ParallelData)
        src_tok = TextTokenizer.load(folder.file(SRC_TOKENIZER))
        tgt_tok = TextTokenizer.load(folder.file(TGT_TOKENIZER))
        check_vocab(run.model, src_tok, tgt_tok, folder.path)
        model = folder.load_weights(Transformer(run.model))
        model.eval()
        return cls(model, src_tok, tgt_tok, run.data.bleu_tokenize or "13a")

    def translate(
        self,
        sentences: Sequence[str],
        decoding: DecodingConfig = GREEDY,
        batch_size: int = 64,
        progress: bool = False,
    ) -> list[str]:
        """Translations in input order, as ``decoding`` says: greedy (the default), beam search
        (the best of :meth:`translate_n_best`) or sampled (from one generator seeded with
        ``decoding.seed`` for all batches: the same seed, sentences and ``batch_size`` give the
        same translations). A sentence gets at most ``decoding.max_new_tokens`` tokens, by
        default ``2 * len(source) + 10`` (:meth:`DecodingConfig.target_budget`), and at most the
        model's max_len - 1. Decoding starts from the target tokenizer's ``bos_id`` and never
        produces its ``suppressed_ids`` (Marian's ``<pad>``, see
        :class:`~vaswani.tokenizer.TextTokenizer`). No sentences give no translations (``[]``); a
        sentence longer than the model's max_len is a :class:`~vaswani.errors.DataError` naming it."""
        if decoding.strategy == "beam":
            best = self.translate_n_best(sentences, replace(decoding, n_best=1), batch_size, progress)
            return [hypotheses[0].text for hypotheses in best]
        generator = decoding.generator()
        bos, eos = self.tgt_tok.bos_id, self.tgt_tok.eos_id

        def decode(src: Tensor) -> list[str]:
            suppress = self.tgt_tok.suppressed_ids
            result = translate_ids(self.model, src, bos, eos, decoding, generator, suppress=suppress)
            return [self.tgt_tok.decode(row) for row in result.tokens.tolist()]

        return self._in_batches(sentences, decode, batch_size, progress)

    def translate_n_best(
        self,
        sentences: Sequence[str],
        decoding: DecodingConfig = PAPER_BEAM,
        batch_size: int = 64,
        progress: bool = False,
    ) -> list[list[Hypothesis]]:
        """The ``decoding.n_best`` (<= ``decoding.beam``) best translations of each sentence, best
        first, by beam search (:func:`vaswani.generation.beam.beam_search`, Hugging Face's
        convention): score = log P(y | x) / lp(|y|). The default is the paper's: beam 4, GNMT
        penalty alpha 0.6, one translation. No sentences give no lists (``[]``)."""
        bos, eos = self.tgt_tok.bos_id, self.tgt_tok.eos_id

        def decode(src: Tensor) -> list[list[Hypothesis]]:
            found = translate_beam_ids(self.model, src, bos, eos, decoding, self.tgt_tok.suppressed_ids)
            return [
                [Hypothesis(self.tgt_tok.decode(ids), score) for ids, score in zip(rows, scores, strict=True)]
                for rows, scores in zip(found.tokens.tolist(), found.scores.tolist(), strict=True)
            ]

        return self._in_batches(sentences, decode, batch_size, progress)

    @torch.no_grad()
    def _in_batches(
        self, sentences: Sequence[str], decode: Callable[[Tensor], list[T]], batch_size: int, progress: bool
    ) -> list[T]:
        """``decode(src)`` over batches of sentences of similar length; results in input order."""
        self.model.eval()
        max_len = self.model.config.max_len
        ids = self.src_tok.encode_batch(list(sentences))
        for line, row in enumerate(ids, start=1):
            if len(row) > max_len:
                raise DataError(f"input line {line}: {len(row)} tokens exceed the model's max_len={max_len}")
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out: dict[int, T] = {}
        starts = range(0, len(order), batch_size)
        bar_off = None if progress else True  # None: tqdm's own test, off when stderr is no terminal
        for start in tqdm(starts, desc="translate", unit="batch", disable=bar_off):
            chunk = order[start : start + batch_size]
            src = pad([ids[i] for i in chunk], self.model.config.pad_id)
            out.update(zip(chunk, decode(src), strict=True))
        return [out[i] for i in range(len(ids))]


@dataclass(frozen=True)
class Hypothesis:
    """A translation and its beam-search score, log P(y | x) / lp(|y|)."""

    text: str
    score: float


def check_vocab(cfg: ModelConfig, src_tok: TextTokenizer, tgt_tok: TextTokenizer, run_dir: Path) -> None:
    """Refuse tokenizers whose vocabularies do not fit the model's embeddings."""
    for tok, size, name in (
        (src_tok, cfg.src_vocab_size, SRC_TOKENIZER),
        (tgt_tok, cfg.tgt_vocab_size, TGT_TOKENIZER),
    ):
        if tok.vocab_size > size:
            raise ConfigError(
                f"{run_dir / name}: vocabulary of {tok.vocab_size} does not fit the model's "
                f"embedding of {size}"
            )


def train_translation(
    run: RunConfig, run_dir: Path, resume: bool = False, quiet: bool = False
) -> tuple[dict[str, Any], Translator, TranslationData]:
    """Train a translation run in ``run_dir`` (or, with ``resume``, continue it: see
    :func:`vaswani.tasks.registry.resume`); return metrics, translator and data."""
    data = load_data(run.data)
    if resume:
        src_tok = TextTokenizer.load(run_dir / SRC_TOKENIZER)
        tgt_tok = TextTokenizer.load(run_dir / TGT_TOKENIZER)
    else:
        src_tok, tgt_tok = build_tokenizers(data, run.data.vocab_size, run.data.shared_vocab)
        run = fit_vocab(run, src_tok, tgt_tok, data)
    check_vocab(run.model, src_tok, tgt_tok, run_dir)
    task = TranslationTask(run, src_tok, tgt_tok, data)

    def save_tokenizers(folder: Path) -> None:
        src_tok.save(folder / SRC_TOKENIZER)
        tgt_tok.save(folder / TGT_TOKENIZER)

    metrics, model = fit_run(run, run_dir, task, lambda: model_of(run), save_tokenizers, resume, quiet)
    assert isinstance(model, Transformer)
    return metrics, Translator(model, src_tok, tgt_tok, run.data.bleu_tokenize or "13a"), data


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
    b, c = bleu(hyps, refs, translator.bleu_tokenize), chrf(hyps, refs)
    lower = bleu(hyps, refs, translator.bleu_tokenize, lowercase=True)
    return {
        "bleu": b.value,
        "bleu_lowercase": lower.value,
        "chrf": c.value,
        "bleu_signature": b.signature,
        "bleu_lowercase_signature": lower.signature,
        "chrf_signature": c.signature,
        "hypotheses": hyps,
    }


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


def model_of(run: RunConfig) -> Transformer:
    """The (untrained) model of a translation run."""
    return Transformer(run.model)


def describe_scores(scores: dict[str, Any]) -> str:
    return f"BLEU {scores['bleu']:.2f} (lowercased {scores['bleu_lowercase']:.2f})  chrF {scores['chrf']:.2f}"


def evaluate_run(run_dir: Path, request: Evaluation) -> list[str]:
    """BLEU and chrF of a translation run on ``request.src``/``ref``, or on the run's own test split
    (its valid split when it has none); the hypotheses are written to ``request.out`` (default
    ``RUN_DIR/hypotheses.NAME``). Returns the report's lines."""
    if request.text:
        raise ConfigError(
            "a translation run is evaluated on --src and --ref, or its own test split, not --text"
        )
    if (request.src is None) != (request.ref is None):
        raise ConfigError("--src and --ref go together")
    translator = Translator.load(run_dir)
    if request.src is not None and request.ref is not None:
        pairs, name = read_parallel(request.src, request.ref), request.src.name
    else:
        data = load_data(RunDir(run_dir).read_config(TASK, ParallelData).data)  # type: ignore[arg-type]
        pairs, name = (data.test, "test") if data.test else (data.valid, "valid")
    decoding = request.decoding or GREEDY
    scores = evaluate_split(translator, pairs, batch_size=request.batch_size, quiet=False, decoding=decoding)
    out = request.out or run_dir / f"hypotheses.{name}"
    Path(out).write_text("\n".join(scores.pop("hypotheses")) + "\n", encoding="utf-8")
    return [
        f"{name}: {describe_scores(scores)}  ({len(pairs)} sentences, {describe_decoding(decoding)})",
        f"  {scores['bleu_signature']}\n  {scores['bleu_lowercase_signature']}\n"
        f"  {scores['chrf_signature']}\nhypotheses: {out}",
    ]


def recipe(flags: Sections) -> str:
    """The embedded default job, or the recipe for the user's files once they are given."""
    data = flags.get("data", {})
    return "translation-files" if "src" in data or "pairs" in data else "translation"


def configure(sections: Sections, flags: Sections, source: str) -> RunConfig:
    """A translation run: files given as flags pick their source (``--pairs``: tsv), one shared
    vocabulary ties all three embeddings unless a tie is given, and paths are stored absolute."""
    given = flags.get("data", {})
    if ("src" in given) != ("tgt" in given):
        raise ConfigError("--src and --tgt go together")
    if ("valid_src" in given) != ("valid_tgt" in given):
        raise ConfigError("--valid-src and --valid-tgt go together")
    if "pairs" in given and "src" in given:
        raise ConfigError("--pairs replaces --src and --tgt: give one or the other")
    model, data = sections.setdefault("model", {}), sections.setdefault("data", {})
    if "pairs" in given or "src" in given:
        data["source"] = "tsv" if "pairs" in given else "files"
    if model.get("arch", "encoder_decoder") != "encoder_decoder":
        raise ConfigError(
            f"{source}: config field 'model.arch': a translator is 'encoder_decoder', got {model['arch']!r}"
        )
    if data.get("shared_vocab"):
        model.setdefault("tie_embeddings", "all")
    else:
        model.setdefault("tie_embeddings", "output")
    absolute(data, PATH_FIELDS)
    return validated(TASK, sections, ParallelData, source)


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
        for sentence, translation in zip(EXAMPLES, translator.translate(EXAMPLES), strict=True):
            lines.append(f"  {sentence}  →  {translation}")
    example = EXAMPLES[0] if data.train_name == DEFAULT_CORPUS else pairs[0][0]
    lines.append(f'\nrun directory: {run_dir}\n  vaswani translate {run_dir} "{example}"')
    return lines
