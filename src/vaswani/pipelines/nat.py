"""The translator of a ``nat`` run (a CMLM decoded by Mask-Predict):
``NatTranslator.load(run_dir).translate([...], MaskPredictConfig(iterations=10, length_beam=5))``
(its data config is :class:`~vaswani.data.config.NatData`).

A nat run's target tokenizer holds one more special token than a translation run's, ``<mask>``
(:func:`with_mask`, appended after the trained pieces), the [MASK] of the decoder's input.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from vaswani.data.config import NatData
from vaswani.errors import ConfigError, RunDirError
from vaswani.generation.mask_predict import (
    MaskPredictConfig,
    check_length_beam,
    mask_predict,
    teacher_ranking,
)
from vaswani.models.cmlm import CMLM
from vaswani.pipelines.common import model_device
from vaswani.pipelines.translation import TGT_TOKENIZER, Translator, read_translation_run
from vaswani.rundir import RunDir
from vaswani.tokenizer import TextTokenizer

TASK = "nat"
MASK = "<mask>"
PAPER_DECODING = MaskPredictConfig()  # T = 10, l = 5


def with_mask(tokenizer: TextTokenizer) -> TextTokenizer:
    """``tokenizer`` with ``<mask>`` added as a special token (in place: a shared vocabulary's
    source side gets it too, and typed text never reads as it)."""
    tokenizer.tokenizer.add_special_tokens([MASK])
    return tokenizer


def mask_id_of(tokenizer: TextTokenizer, where: Path) -> int:
    """The id of ``<mask>`` in a nat run's target tokenizer saved at ``where``."""
    found = tokenizer.tokenizer.token_to_id(MASK)
    if found is None:
        raise RunDirError(f"{where}: a nat run's target tokenizer needs the special token {MASK}")
    return found


def shares_vocabulary(teacher: TextTokenizer, nat: TextTokenizer) -> bool:
    """Whether ``teacher``'s vocabulary is ``nat``'s without ``<mask>``: the same pieces, the same ids."""
    ours = {piece: i for piece, i in nat.tokenizer.get_vocab().items() if piece != MASK}
    return teacher.tokenizer.get_vocab() == ours


class NatTranslator(Translator):
    """A trained CMLM with its tokenizers; sentences are decoded in batches of similar length by
    Mask-Predict (:func:`~vaswani.generation.mask_predict.mask_predict`) and returned in input order.
    The translations of a sentence do not depend on the other sentences of its batch. ``teacher``,
    an autoregressive translator over the same vocabularies (:meth:`with_teacher`), ranks each
    sentence's candidates where the decoding asks for it (``rank_by="teacher"``)."""

    def __init__(
        self,
        model: CMLM,
        src_tok: TextTokenizer,
        tgt_tok: TextTokenizer,
        mask_id: int,
        bleu_tokenize: str = "13a",
    ) -> None:
        super().__init__(model, src_tok, tgt_tok, bleu_tokenize)
        self.cmlm, self.mask_id = model, mask_id
        self.teacher: Translator | None = None

    def with_teacher(self, teacher: Translator, name: str = "the teacher") -> NatTranslator:
        """This translator with ``teacher`` (its model moved to the CMLM's device) to rank candidates;
        a :class:`ConfigError` naming ``name`` where its vocabularies or special ids are not the
        CMLM's."""
        same_ids = all(
            getattr(teacher.tgt_tok, f) == getattr(self.tgt_tok, f) for f in ("bos_id", "eos_id", "pad_id")
        )
        if not (
            same_ids
            and shares_vocabulary(teacher.src_tok, self.src_tok)
            and shares_vocabulary(teacher.tgt_tok, self.tgt_tok)
        ):
            raise ConfigError(
                f"{name}: its vocabularies are not the nat run's (a teacher must be the run it was distilled "
                "from, or one trained on the same tokenizers)"
            )
        teacher.model.to(model_device(self.cmlm))
        self.teacher = teacher
        return self

    @classmethod
    def load(cls, run_dir: str | Path, device: str | torch.device = "auto") -> NatTranslator:
        """The translator of a nat run, its model on ``device`` (auto, cpu, cuda, cuda:N, mps); the
        weights (the best by ``train.select_by`` where the run kept them, else the last:
        :attr:`weights_note` says which) are read on the CPU, then moved."""
        found = read_translation_run(run_dir, TASK, NatData, CMLM, device)
        mask_id = mask_id_of(found.tgt_tok, RunDir(run_dir).file(TGT_TOKENIZER))
        assert isinstance(found.model, CMLM)
        translator = cls(
            found.model, found.src_tok, found.tgt_tok, mask_id, found.run.data.bleu_tokenize or "13a"
        )
        translator.weights_note = found.weights_note
        return translator

    @property
    def suppressed(self) -> tuple[int, ...]:
        """The ids Mask-Predict never produces: the autoregressive translator's, BOS and EOS."""
        return (*super().suppressed, self.tgt_tok.bos_id, self.tgt_tok.eos_id)

    def check(self, decoding: MaskPredictConfig) -> None:
        """Refuse a ``decoding`` this run cannot do (a length beam wider than its length classes, a
        teacher's ranking without a teacher)."""
        check_length_beam(decoding, self.cmlm)
        if decoding.rank_by == "teacher" and self.teacher is None:
            raise ConfigError(
                "decoding.rank_by teacher needs an autoregressive teacher to score the candidates "
                "(vaswani translate --teacher RUN)"
            )

    def translate(  # type: ignore[override]
        self,
        sentences: Sequence[str],
        decoding: MaskPredictConfig = PAPER_DECODING,
        batch_size: int = 64,
        progress: bool = False,
    ) -> list[str]:
        """Translations in input order, by Mask-Predict with ``decoding``'s iterations and length
        beam (the paper's T = 10, l = 5 by default). No sentences give no translations (``[]``); a
        sentence longer than the model's max_len is a :class:`~vaswani.errors.DataError`."""
        self.check(decoding)
        teacher = None
        if self.teacher is not None:
            teacher = teacher_ranking(self.teacher.model, self.tgt_tok.bos_id, self.tgt_tok.eos_id)
            if self.teacher.model.training:
                self.teacher.model.eval()

        def decode(src: Tensor) -> list[str]:
            found = mask_predict(self.cmlm, src, self.mask_id, decoding, self.suppressed, teacher=teacher)
            return [
                self.tgt_tok.decode(row[:length])
                for row, length in zip(found.tokens.tolist(), found.lengths.tolist(), strict=True)
            ]

        return self._in_batches(sentences, decode, batch_size, progress)
