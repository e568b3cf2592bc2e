"""The translator that uses a translation run: ``Translator.load(run_dir).translate([...])``.

Decoding is greedy by default, or as one :class:`~vaswani.generation.config.DecodingConfig` says
(beam search, sampling); sentences are decoded in batches of similar length and returned in input
order. Decoding runs on the model's device: ``load(run_dir, device=...)`` puts it there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import torch
from torch import Tensor, nn
from tqdm import tqdm

from vaswani.config import ModelConfig, RunConfig
from vaswani.data.batching import pad
from vaswani.data.config import ParallelData
from vaswani.errors import ConfigError, DataError
from vaswani.generation.compiled import CompiledDecoding
from vaswani.generation.config import GREEDY, DecodingConfig
from vaswani.generation.seq2seq import translate_beam_ids, translate_ids
from vaswani.io import load_weights
from vaswani.models.rnn import RNNTranslator
from vaswani.models.transformer import Transformer
from vaswani.pipelines.common import model_device
from vaswani.rundir import RunDir
from vaswani.runtime import CompileBackend, resolve_device
from vaswani.tokenizer import TextTokenizer
from vaswani.training.selection import chosen_weights

TASK = "translation"
SRC_TOKENIZER, TGT_TOKENIZER = "src_tokenizer.json", "tgt_tokenizer.json"
PAPER_BEAM = DecodingConfig(beam=4)  # the paper's beam search: beam 4, GNMT length penalty alpha 0.6
T = TypeVar("T")


class Translator:
    """A trained translation model with its tokenizers: ``Translator.load(run_dir).translate([...])``.

    A translator built from a model in memory decodes on that model's device."""

    def __init__(
        self,
        model: Transformer | RNNTranslator,
        src_tok: TextTokenizer,
        tgt_tok: TextTokenizer,
        bleu_tokenize: str = "13a",
    ) -> None:
        self.model, self.src_tok, self.tgt_tok = model, src_tok, tgt_tok
        self.bleu_tokenize = bleu_tokenize
        self.weights_note = ""  # which weights file load() chose, for the commands to say
        self.compiled: CompiledDecoding | None = None

    def compile_decoding(self, backend: CompileBackend | None = None, mode: str | None = None) -> None:
        """Decode greedily, by sampling and by beam search through ``torch.compile`` from now on
        (static KV caches, :mod:`vaswani.generation.compiled`), or eagerly after one line on stderr
        where it cannot work here."""
        self.compiled = CompiledDecoding.where_supported(model_device(self.model), backend, mode)

    @property
    def suppressed(self) -> tuple[int, ...]:
        """The ids decoding never produces: the target tokenizer's ``suppressed_ids`` (Marian's
        ``<pad>``) and the rows that pad the output embedding past the tokenizer's vocabulary."""
        padding = range(self.tgt_tok.vocab_size, self.model.config.tgt_vocab_size)
        return (*self.tgt_tok.suppressed_ids, *padding)

    @classmethod
    def load(cls, run_dir: str | Path, device: str | torch.device = "auto") -> Translator:
        """The translator of a translation run, its model on ``device`` (auto, cpu, cuda, cuda:N,
        mps: :func:`~vaswani.runtime.resolve_device`); the weights are read on the CPU, then moved.
        They are the best by ``train.select_by`` where the run kept them, else the last
        (:func:`~vaswani.training.selection.chosen_weights`; :attr:`weights_note` says which)."""
        found = read_translation_run(run_dir, TASK, ParallelData, translation_model, device)
        translator = cls(found.model, found.src_tok, found.tgt_tok, found.run.data.bleu_tokenize or "13a")
        translator.weights_note = found.weights_note
        return translator

    def translate(
        self,
        sentences: Sequence[str],
        decoding: DecodingConfig = GREEDY,
        batch_size: int = 64,
        progress: bool = False,
        on_step: Callable[[Tensor], bool] | None = None,
    ) -> list[str]:
        """Translations in input order, as ``decoding`` says: greedy (the default), beam search
        (the best of :meth:`translate_n_best`) or sampled (from one generator seeded with
        ``decoding.seed`` for all batches: the same seed, sentences and ``batch_size`` give the
        same translations). A sentence gets at most ``decoding.max_new_tokens`` tokens, by
        default ``2 * len(source) + 10`` (:meth:`DecodingConfig.target_budget`), and at most the
        model's max_len - 1. Decoding starts from the target tokenizer's ``bos_id`` and never
        produces its :attr:`suppressed` ids (Marian's ``<pad>``, the embedding's padding rows; see
        :class:`~vaswani.tokenizer.TextTokenizer`). No sentences give no translations (``[]``); a
        sentence longer than the model's max_len is a :class:`~vaswani.errors.DataError` naming it.
        ``on_step(tokens)`` sees each decoding step's tokens of a batch ((batch,) greedy and
        sampling; (rows still searching, beam) in beam search: see :meth:`translate_n_best`); an
        exception it raises stops the translation, as a server does for a client that has gone."""
        if decoding.strategy == "beam":
            n_best = replace(decoding, n_best=1)
            best = self.translate_n_best(sentences, n_best, batch_size, progress, on_step)
            return [hypotheses[0].text for hypotheses in best]
        generator = decoding.generator(model_device(self.model))
        bos, eos = self.tgt_tok.bos_id, self.tgt_tok.eos_id

        def decode(src: Tensor) -> list[str]:
            suppress = self.suppressed
            result = translate_ids(
                self.model,
                src,
                bos,
                eos,
                decoding,
                generator,
                suppress=suppress,
                on_step=on_step,
                compiled=self.compiled,
            )
            return [self.tgt_tok.decode(row) for row in result.tokens.tolist()]

        return self._in_batches(sentences, decode, batch_size, progress)

    def translate_n_best(
        self,
        sentences: Sequence[str],
        decoding: DecodingConfig = PAPER_BEAM,
        batch_size: int = 64,
        progress: bool = False,
        on_step: Callable[[Tensor], bool] | None = None,
    ) -> list[list[Hypothesis]]:
        """The ``decoding.n_best`` (<= ``decoding.beam``) best translations of each sentence, best
        first, by beam search (:func:`vaswani.generation.beam.beam_search`, Hugging Face's
        convention): score = log P(y | x) / lp(|y|). The default is the paper's: beam 4, GNMT
        penalty alpha 0.6, one translation. No sentences give no lists (``[]``). ``on_step(tokens)``
        is consulted once a search step with the newest token of each running hypothesis (rows
        still searching, beam); an exception it raises stops the search (a client that has gone)."""
        bos, eos = self.tgt_tok.bos_id, self.tgt_tok.eos_id

        def decode(src: Tensor) -> list[list[Hypothesis]]:
            found = translate_beam_ids(
                self.model, src, bos, eos, decoding, self.suppressed, on_step, self.compiled
            )
            return [
                [Hypothesis(self.tgt_tok.decode(ids), score) for ids, score in zip(rows, scores, strict=True)]
                for rows, scores in zip(found.tokens.tolist(), found.scores.tolist(), strict=True)
            ]

        return self._in_batches(sentences, decode, batch_size, progress)

    @torch.no_grad()
    def _in_batches(
        self, sentences: Sequence[str], decode: Callable[[Tensor], list[T]], batch_size: int, progress: bool
    ) -> list[T]:
        """``decode(src)`` over batches of sentences of similar length, ``src`` on the model's
        device; results in input order."""
        if self.model.training:  # eval() walks every module: not on each call
            self.model.eval()
        max_len = self.model.config.max_len
        ids = self.src_tok.encode_batch(list(sentences))
        for line, row in enumerate(ids, start=1):
            if len(row) > max_len:
                raise DataError(f"input line {line}: {len(row)} tokens exceed the model's max_len={max_len}")
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out: dict[int, T] = {}
        device = model_device(self.model)
        starts = range(0, len(order), batch_size)
        bar_off = None if progress else True  # None: tqdm's own test, off when stderr is no terminal
        for start in tqdm(starts, desc="translate", unit="batch", disable=bar_off):
            chunk = order[start : start + batch_size]
            src = pad([ids[i] for i in chunk], self.model.config.pad_id).to(device)
            out.update(zip(chunk, decode(src), strict=True))
        return [out[i] for i in range(len(ids))]


def translation_model(cfg: ModelConfig) -> Transformer | RNNTranslator:
    """The (untrained) model of a translation run's ``model`` config: its ``arch``'s."""
    return RNNTranslator(cfg) if cfg.arch == "rnn" else Transformer(cfg)


@dataclass(frozen=True)
class Hypothesis:
    """A translation and its beam-search score, log P(y | x) / lp(|y|)."""

    text: str
    score: float


def check_vocab(cfg: ModelConfig, src_tok: TextTokenizer, tgt_tok: TextTokenizer, run_dir: Path) -> None:
    """Refuse tokenizers whose vocabularies do not fit the model's embeddings, or whose padding id
    is not the model's ``pad_id`` (the source's padding mask and the target's are built from it).
    A vocabulary smaller than the embedding is allowed: the rows past it pad the table, and
    decoding never produces them."""
    for tok, size, name in (
        (src_tok, cfg.src_vocab_size, SRC_TOKENIZER),
        (tgt_tok, cfg.tgt_vocab_size, TGT_TOKENIZER),
    ):
        if tok.vocab_size > size:
            raise ConfigError(
                f"{run_dir / name}: vocabulary of {tok.vocab_size} does not fit the model's "
                f"embedding of {size}"
            )
        if tok.pad_id != cfg.pad_id:
            raise ConfigError(
                f"{run_dir / name}: its padding id is {tok.pad_id}, the model's pad_id is {cfg.pad_id} "
                f"({run_dir / 'config.json'})"
            )


@dataclass(frozen=True)
class TranslationRun:
    """A translation-shaped run (``translation``, ``nat``) read from its directory: its config,
    both tokenizers (checked against the model), the model with its chosen weights on its device,
    and which weights those are."""

    run: RunConfig
    src_tok: TextTokenizer
    tgt_tok: TextTokenizer
    model: nn.Module
    weights_note: str


def read_translation_run(
    run_dir: str | Path,
    task: str,
    data: type[ParallelData],
    build: Callable[[ModelConfig], nn.Module],
    device: str | torch.device,
) -> TranslationRun:
    """The run ``run_dir`` of ``task`` (its data section of class ``data``), its model built by
    ``build`` with the best weights by ``train.select_by`` where the run kept them, else the last
    (:func:`~vaswani.training.selection.chosen_weights`), read on the CPU and moved to ``device``
    (:func:`~vaswani.runtime.resolve_device`) in eval mode."""
    where = resolve_device(device)
    folder = RunDir(run_dir)
    run = folder.read_config(task, data)
    src_tok = TextTokenizer.load(folder.file(SRC_TOKENIZER))
    tgt_tok = TextTokenizer.load(folder.file(TGT_TOKENIZER))
    check_vocab(run.model, src_tok, tgt_tok, folder.path)
    path, note = chosen_weights(folder, run.train.select_by)
    model = build(run.model)
    load_weights(model, path)
    return TranslationRun(run, src_tok, tgt_tok, model.to(where).eval(), note)
