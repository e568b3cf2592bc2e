"""Non-autoregressive translation (``vaswani train nat``): a conditional masked language model
(:class:`~vaswani.models.cmlm.CMLM`, Ghazvininejad et al. 2019) trained on the translation task's
data, decoded by Mask-Predict (:class:`~vaswani.pipelines.nat.NatTranslator`).

Training masks a uniform-random number k ∈ 1 … N of the N target tokens of each sentence, at
uniform-random positions, and predicts them (label-smoothed cross-entropy over the masked positions
only); the length classifier is trained jointly on the same batches, its loss weighted 0.1
(fairseq's ``length_loss_factor``). A batch's loss is the mean over its masked tokens plus 0.1 ×
the mean over its sentences, weighted by its sentences in gradient accumulation.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.config import RunConfig
from vaswani.data.batching import Seq2SeqBatch
from vaswani.data.config import NatData
from vaswani.data.readers import read_parallel
from vaswani.errors import ConfigError
from vaswani.generation.config import DecodingConfig
from vaswani.generation.mask_predict import MaskPredictConfig
from vaswani.io import atomic_write_text, json_text, read_json
from vaswani.metrics import bleu, chrf, perplexity, translation_scores
from vaswani.models.cmlm import CMLM
from vaswani.pipelines.common import on_model_device
from vaswani.pipelines.nat import (
    PAPER_DECODING,
    TASK,
    NatTranslator,
    mask_id_of,
    shares_vocabulary,
    with_mask,
)
from vaswani.pipelines.translation import SRC_TOKENIZER, TGT_TOKENIZER, Translator, check_vocab
from vaswani.recipes import Sections
from vaswani.rundir import RunDir
from vaswani.runtime import Resolved
from vaswani.tasks import translation
from vaswani.tasks.evaluation import Evaluation, Report
from vaswani.tasks.mrt import CORPUS, initialised
from vaswani.tasks.translation import Pairs, TranslationData, TranslationTask
from vaswani.tasks.word_vectors import embedding_rows, sized_for, with_word_vectors
from vaswani.tokenizer import TextTokenizer
from vaswani.training.distributed import world
from vaswani.training.losses import label_smoothed_nll
from vaswani.training.trainer import fit_run

LENGTH_WEIGHT = 0.1  # fairseq's length_loss_factor for CMLM
TEACHER_BEAM = DecodingConfig(beam=5)  # distillation's decoding of the training sources
PATHS = (*translation.PATH_FIELDS, "distill_from")
INHERITED = (*CORPUS, "distill_from")  # what a run started from another (--init) takes from it
DISTILLED_FILE = "distilled.json"  # the teacher's translations of the training sources, in order


def targets_of(batch: Seq2SeqBatch, eos_id: int) -> Tensor:
    """(batch, tgt_len − 1): the target tokens alone (``tgt_out`` without EOS), padded."""
    return batch.tgt_out.masked_fill(batch.tgt_out == eos_id, batch.pad_id)[:, :-1]


def mask_targets(tgt: Tensor, pad_id: int, mask_id: int) -> tuple[Tensor, Tensor]:
    """The decoder input of ``tgt`` (batch, len): k ~ U{1 … N} of each row's N tokens replaced by
    ``mask_id`` at uniform-random positions (from the global generator of ``tgt``'s device), and
    where (batch, len, bool)."""
    real = tgt != pad_id
    lengths = real.sum(1)
    k = (torch.rand(lengths.shape, device=tgt.device) * lengths).long() + 1
    rank = torch.rand(tgt.shape, device=tgt.device).masked_fill(~real, 2.0).argsort(1).argsort(1)
    masked = (rank < k[:, None]) & real
    return tgt.masked_fill(masked, mask_id), masked


class NatTask(TranslationTask):
    """The translation task's batches; the CMLM's masked-token and length losses; valid loss (every
    target token masked), length accuracy, and BLEU and chrF by Mask-Predict (T = 10, l = 5)."""

    def __init__(
        self,
        run: RunConfig,
        src_tok: TextTokenizer,
        tgt_tok: TextTokenizer,
        data: TranslationData,
        mask_id: int,
    ) -> None:
        super().__init__(run, src_tok, tgt_tok, data)
        self.mask_id = mask_id

    def _losses(
        self, model: nn.Module, batch: Seq2SeqBatch, masked_input: bool
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Summed token loss, its token count, and the summed length loss of ``batch``; with
        ``masked_input`` a random part of the target masked (training), else all of it."""
        assert isinstance(model, CMLM)
        tgt = targets_of(batch, self.tgt_tok.eos_id)
        if masked_input:
            inputs, masked = mask_targets(tgt, self.pad_id, self.mask_id)
        else:
            masked = tgt != self.pad_id
            inputs = tgt.masked_fill(masked, self.mask_id)
        source = model.encode(batch.src)
        logits, _ = model.decode(inputs, source)
        smoothing = self.smoothing if masked_input else 0.0
        tokens = label_smoothed_nll(logits, tgt.masked_fill(~masked, self.pad_id), self.pad_id, smoothing)
        length = F.cross_entropy(
            model.length_logits(source).float(), (tgt != self.pad_id).sum(1), reduction="sum"
        )
        return tokens, masked.sum(), length

    def loss(self, model: nn.Module, batch: Seq2SeqBatch) -> tuple[Tensor, int]:
        tokens, count, length = self._losses(model, batch, masked_input=True)
        rows = batch.src.shape[0]
        return (tokens / count.clamp(min=1) + LENGTH_WEIGHT * length / rows) * rows, rows

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        assert isinstance(model, CMLM)
        total, count, right, rows = 0.0, 0, 0, 0
        for batch in (on_model_device(model, b) for b in self._valid):
            tokens, n, _ = self._losses(model, batch, masked_input=False)
            lengths = (targets_of(batch, self.tgt_tok.eos_id) != self.pad_id).sum(1)
            guessed = model.length_logits(model.encode(batch.src)).argmax(1)
            total, count = total + float(tokens), count + int(n)
            right, rows = right + int((guessed == lengths).sum()), rows + batch.src.shape[0]
        valid_loss = total / max(1, count)
        translator = NatTranslator(model, self.src_tok, self.tgt_tok, self.mask_id, self.bleu_tokenize)
        hyps = translator.translate([s for s, _ in self._bleu_pairs], PAPER_DECODING)
        refs = [t for _, t in self._bleu_pairs]
        return {
            "valid_loss": valid_loss,
            "valid_ppl": perplexity(valid_loss),
            "valid_length_accuracy": right / max(1, rows),
            "valid_bleu": bleu(hyps, refs, self.bleu_tokenize).value,
            "valid_chrf": chrf(hyps, refs).value,
        }


def distilled(
    data: TranslationData,
    teacher_dir: str,
    src_tok: TextTokenizer,
    tgt_tok: TextTokenizer,
    quiet: bool,
    run_dir: Path,
    init: str | None = None,
    corpus: NatData | None = None,
) -> TranslationData:
    """``data`` with its training targets replaced by the beam-5 translations of the autoregressive
    run ``teacher_dir``, whose tokenizers must be ``src_tok`` and ``tgt_tok`` (``<mask>`` aside).
    The translations are made once and kept in ``run_dir`` (``DISTILLED_FILE``, written whole or
    not at all), where a resumed run reads them without the teacher; a run that starts from the nat
    run ``init`` takes that run's, where it learned from the same teacher on the same ``corpus``."""
    sources = [s for s, _ in data.train]
    path = run_dir / DISTILLED_FILE
    outputs = read_json(path) if path.is_file() else None
    if not kept(outputs, sources) and init is not None and same_lessons(init, teacher_dir, corpus):
        outputs = read_json(Path(init) / DISTILLED_FILE) if (Path(init) / DISTILLED_FILE).is_file() else None
        if kept(outputs, sources) and world().main:
            run_dir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json_text(outputs, ensure_ascii=False))
    if not kept(outputs, sources):
        teacher = Translator.load(teacher_dir, "cpu")
        for own, theirs, side in ((src_tok, teacher.src_tok, "source"), (tgt_tok, teacher.tgt_tok, "target")):
            if not shares_vocabulary(theirs, own):
                raise ConfigError(
                    f"--distill-from {teacher_dir}: its {side} vocabulary ({theirs.vocab_size} pieces) "
                    f"differs from this run's ({own.vocab_size}); train the teacher on the same data with "
                    "the same --vocab-size and --shared-vocab"
                )
        outputs = teacher.translate(sources, TEACHER_BEAM, progress=not quiet)
        if world().main:  # every process translates the same; one writes it
            run_dir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json_text(outputs, ensure_ascii=False))
    assert isinstance(outputs, list)
    train = list(zip(sources, outputs, strict=True))
    return TranslationData(train, data.valid, data.test, f"{data.train_name} (distilled)", data.valid_name)


def kept(outputs: Any, sources: list[str]) -> bool:
    """Whether ``outputs`` (read from a ``DISTILLED_FILE``) are translations of ``sources``."""
    return isinstance(outputs, list) and len(outputs) == len(sources)


def same_lessons(init: str, teacher_dir: str, corpus: NatData | None) -> bool:
    """Whether the nat run ``init`` was distilled from ``teacher_dir`` on the corpus that ``corpus``
    names (the same :data:`~vaswani.tasks.mrt.CORPUS` fields)."""
    theirs = RunDir(init).read_config(TASK, NatData).data
    return (
        corpus is not None
        and getattr(theirs, "distill_from", None) == teacher_dir
        and all(getattr(theirs, name) == getattr(corpus, name) for name in CORPUS)
    )


def train_nat(
    run: RunConfig, run_dir: Path, resume: bool = False, quiet: bool = False, device: Resolved = None
) -> tuple[dict[str, Any], NatTranslator, TranslationData]:
    """Train a nat run in ``run_dir`` (or, with ``resume``, continue it); return metrics, translator
    and data."""
    assert isinstance(run.data, NatData)
    rows, start = None, None
    if not resume and run.data.init is not None:
        run, src_tok, tgt_tok, start = initialised(run, TASK, NatData, CMLM, INHERITED)
        assert isinstance(run.data, NatData)
    data = translation.load_data(run.data, quiet or not world().main)
    if resume or start is not None:
        if resume:
            src_tok = TextTokenizer.load(run_dir / SRC_TOKENIZER)
            tgt_tok = TextTokenizer.load(run_dir / TGT_TOKENIZER)
        if run.data.distill_from is not None:
            data = distilled(
                data, run.data.distill_from, src_tok, tgt_tok, quiet, run_dir, run.data.init, run.data
            )
    else:
        src_tok, tgt_tok = translation.build_tokenizers(
            data, run.data.vocab_size, run.data.shared_vocab, run.data.tokenizer, quiet or not world().main
        )
        if run.data.distill_from is not None:
            data = distilled(data, run.data.distill_from, src_tok, tgt_tok, quiet, run_dir)
        with_mask(tgt_tok)
        run = translation.fit_vocab(run, src_tok, tgt_tok, data)
        if run.data.word_vectors is not None:
            rows = embedding_rows(run.data, src_tok, run.model.d_model)
            run = RunConfig(run.task, sized_for(run.model, rows), run.train, run.data)
            if not quiet:
                print(rows.report)
    check_vocab(run.model, src_tok, tgt_tok, run_dir)
    mask_id = mask_id_of(tgt_tok, run_dir / TGT_TOKENIZER)
    task = NatTask(run, src_tok, tgt_tok, data, mask_id)

    def save_tokenizers(folder: Path) -> None:
        src_tok.save(folder / SRC_TOKENIZER)
        tgt_tok.save(folder / TGT_TOKENIZER)

    fresh = lambda: model_of(run) if start is None else start  # noqa: E731 (--init: the trained run's)
    build = with_word_vectors(fresh, translation.source_embedding, rows, run.data.freeze_embeddings)
    metrics, model = fit_run(run, run_dir, task, build, save_tokenizers, resume, quiet, device=device)
    assert isinstance(model, CMLM)
    bleu_tokenize = run.data.bleu_tokenize or "13a"
    return metrics, NatTranslator(model, src_tok, tgt_tok, mask_id, bleu_tokenize), data


def model_of(run: RunConfig) -> CMLM:
    """The (untrained) model of a nat run."""
    return CMLM(run.model)


def describe(decoding: MaskPredictConfig) -> str:
    return f"Mask-Predict, T = {decoding.iterations}, l = {decoding.length_beam}"


def score_split(
    translator: NatTranslator,
    pairs: Pairs,
    decoding: MaskPredictConfig,
    batch_size: int = 64,
    quiet: bool = True,
) -> dict[str, Any]:
    """BLEU (cased and lowercased) and chrF of Mask-Predict's translations of ``pairs``, with their
    signatures and the hypotheses, as :func:`vaswani.tasks.translation.evaluate_split` gives them."""
    hyps = translator.translate([s for s, _ in pairs], decoding, batch_size, progress=not quiet)
    refs = [t for _, t in pairs]
    return translation_scores(hyps, refs, translator.bleu_tokenize)


def evaluate_run(run_dir: Path, request: Evaluation) -> Report:
    """BLEU and chrF of a nat run by Mask-Predict (T = 10, l = 5) on ``request.src``/``ref``, or on
    the run's own test split (its valid split when it has none); the hypotheses are written to
    ``request.out`` (default ``RUN_DIR/hypotheses.NAME``). Returns the report's lines."""
    if request.text:
        raise ConfigError("a nat run is evaluated on --src and --ref, or its own test split, not --text")
    if (request.src is None) != (request.ref is None):
        raise ConfigError("--src and --ref go together")
    if request.decoding is not None and request.decoding != DecodingConfig():
        raise ConfigError(
            f"a nat run is decoded by {describe(PAPER_DECODING)}: drop the autoregressive decoding flags"
        )
    translator = NatTranslator.load(run_dir, request.device)
    if request.src is not None and request.ref is not None:
        pairs, name = read_parallel(request.src, request.ref), request.src.name
    else:
        data = translation.load_data(RunDir(run_dir).read_config(TASK, NatData).data)  # type: ignore[arg-type]
        pairs, name = (data.test, "test") if data.test else (data.valid, "valid")
    scores = score_split(translator, pairs, PAPER_DECODING, request.batch_size, quiet=False)
    out = request.out or run_dir / f"hypotheses.{name}"
    atomic_write_text(Path(out), "\n".join(scores.pop("hypotheses")) + "\n")
    return Report(
        [
            f"{name}: {translation.describe_scores(scores)}  ({len(pairs)} sentences, "
            f"{describe(PAPER_DECODING)})",
            f"  {scores['bleu_signature']}\n  {scores['bleu_lowercase_signature']}\n"
            f"  {scores['chrf_signature']}\nhypotheses: {out}",
        ]
    )


def recipe(flags: Sections) -> str:
    """The embedded default job, or the recipe for the user's files once they are given."""
    return "nat-files" if translation.recipe(flags).startswith("translation-files") else "nat"


def configure(sections: Sections, flags: Sections, source: str) -> RunConfig:
    """A translation run's rules (:func:`vaswani.tasks.translation.configure`), ``distill_from``
    stored absolute."""
    return translation.configure(sections, flags, source, TASK, NatData, PATHS)


def finish(
    result: tuple[dict[str, Any], NatTranslator, TranslationData], run_dir: Path, started: float, quiet: bool
) -> list[str]:
    """After training: BLEU and chrF by Mask-Predict (T = 10, l = 5) on the test split (the valid one
    without it), added to ``metrics.json``, and the report's lines (with example translations of the
    default corpus)."""
    metrics, translator, data = result
    pairs, split = (data.test, "test") if data.test else (data.valid, "valid")
    scores = score_split(translator, pairs, PAPER_DECODING, quiet=quiet)
    metrics = translation.write_test_metrics(run_dir, metrics, scores, split)
    lines = [
        f"\n{split} {translation.describe_scores(scores)}  ({len(pairs)} sentences, "
        f"{describe(PAPER_DECODING)})",
        f"  {scores['bleu_signature']}",
        f"valid loss {metrics['valid_loss']:.3f}, length accuracy {metrics['valid_length_accuracy']:.3f}, "
        f"{metrics['steps']} steps, {metrics['tokens_per_second']:,.0f} tokens/s, "
        f"total {time.perf_counter() - started:.0f} s",
    ]
    default = data.train_name.startswith(translation.DEFAULT_CORPUS)
    if default:
        lines.append("")
        shown = translation.EmptyTranslations()
        for sentence, out in zip(
            translation.EXAMPLES, translator.translate(translation.EXAMPLES), strict=True
        ):
            lines.append(f"  {sentence}  →  {shown(out)}")
    example = translation.EXAMPLES[0] if default else pairs[0][0]
    lines.append(f'\nrun directory: {run_dir}\n  vaswani translate {run_dir} "{example}" --iterations 10')
    return lines
