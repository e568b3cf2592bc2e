"""The task registry: one entry per task, and everything that dispatches on a task asks it.

An entry (:class:`TaskSpec`) names the task's model builder, its training function (the trainer's
:class:`~vaswani.training.trainer.Task` adapter inside it), the wrapper that uses a trained run
(``Translator``, ``LanguageModel``...: :mod:`vaswani.pipelines`), its ``evaluate`` hook and its
Hugging Face family. The command line (``train``, ``evaluate``, ``plot``, ``attention``,
``average``), ``import-hf``/``export-hf`` and the Python API (:func:`load`, and
:mod:`vaswani.tasks.lifecycle`'s ``train`` and ``resume``) find a task here, so that a new task is
one model module, one adapter module and one entry in :data:`TASKS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vaswani.config import ARCHS, FAMILY_FIELDS, RunConfig
from vaswani.data.config import (
    DataConfig,
    ImageData,
    LabeledData,
    LMData,
    NatData,
    ParallelData,
    TagData,
    TextData,
)
from vaswani.errors import RunDirError
from vaswani.pipelines import bert as bert_run
from vaswani.pipelines import classify as classify_run
from vaswani.pipelines import encoder as encoder_run
from vaswani.pipelines import image as image_run
from vaswani.pipelines import lm as lm_run
from vaswani.pipelines import mlm as mlm_run
from vaswani.pipelines import nat as nat_run
from vaswani.pipelines import tag as tag_run
from vaswani.pipelines import translation as translation_run
from vaswani.recipes import Sections
from vaswani.rundir import RunDir
from vaswani.tasks import classify, image, lm, mlm, nat, tag, translation
from vaswani.tasks.evaluation import Evaluation, Report
from vaswani.tasks.settings import run_config


@dataclass(frozen=True)
class TaskSpec:
    """One task. ``data`` is the class of its runs' data section; ``model`` builds the untrained
    model of a run config; ``load(run_dir, device=...)`` reads a run directory into the task's
    wrapper (a :class:`~vaswani.pipelines.common.Pipeline`), its model on that device;
    ``train(run, run_dir, resume, quiet, device)`` trains or continues a run (on ``device``, resolved
    once by :mod:`vaswani.tasks.lifecycle`) and returns
    ``(metrics, wrapper, ...)`` (None: runs of this task are imported, not trained);
    ``recipe(flags)`` names the packaged recipe a new run starts from (:mod:`vaswani.recipes`),
    ``configure(sections, flags, source)`` applies the task's rules and validates
    (:mod:`vaswani.tasks.settings`), ``finish(result, run_dir, started, quiet)`` does what follows
    training and returns the report's lines; ``evaluate(run_dir, request)`` scores a run and
    returns a :class:`~vaswani.tasks.evaluation.Report`, ``evaluates`` says what it scores and on
    which inputs (None: ``cannot_evaluate`` says why and what to do instead); ``hf_family`` names
    the Hugging Face family that ``export-hf`` writes (:mod:`vaswani.interop`); ``archs`` are the
    model archs its runs may have (``vaswani train TASK`` offers only their fields' flags:
    :func:`model_fields_skipped`)."""

    name: str
    summary: str
    data: type[DataConfig]
    model: Callable[[RunConfig], nn.Module]
    load: Callable[..., Any]
    train: Callable[..., tuple[Any, ...]] | None = None
    recipe: Callable[[Sections], str] | None = None
    configure: Callable[[Sections, Sections, str], RunConfig] | None = None
    finish: Callable[[Any, Path, float, bool], list[str]] | None = None
    evaluate: Callable[[Path, Evaluation], Report] | None = None
    evaluates: str = ""
    cannot_evaluate: str = ""
    hf_family: str | None = None
    archs: tuple[str, ...] = ARCHS


ENTRIES = (
    TaskSpec(
        name="lm",
        archs=("decoder_only",),
        summary="train a decoder-only language model (GPT)",
        data=LMData,
        model=lm_run.model_of,
        load=lm_run.LanguageModel.load,
        train=lm.train_lm,
        recipe=lm.recipe,
        configure=lm.configure,
        finish=lm.finish,
        evaluate=lm.evaluate_run,
        evaluates="loss and perplexity on --text",
        hf_family="gpt2",
    ),
    TaskSpec(
        name="translation",
        archs=("encoder_decoder", "rnn"),
        summary="train an encoder-decoder translator",
        data=ParallelData,
        model=translation.model_of,
        load=translation_run.Translator.load,
        train=translation.train_translation,
        recipe=translation.recipe,
        configure=translation.configure,
        finish=translation.finish,
        evaluate=translation.evaluate_run,
        evaluates="BLEU and chrF on --src and --ref (default: its own test split), the hypotheses "
        "written to --out",
        hf_family="marian",
    ),
    TaskSpec(
        name="nat",
        archs=("encoder_decoder",),
        summary="train a non-autoregressive translator (CMLM, decoded by Mask-Predict)",
        data=NatData,
        model=nat.model_of,
        load=nat_run.NatTranslator.load,
        train=nat.train_nat,
        recipe=nat.recipe,
        configure=nat.configure,
        finish=nat.finish,
        evaluate=nat.evaluate_run,
        evaluates="BLEU and chrF by Mask-Predict (T = 10, l = 5) on --src and --ref (default: its own "
        "test split), the hypotheses written to --out",
    ),
    TaskSpec(
        name="mlm",
        archs=("encoder_only",),
        summary="pretrain a BERT by masked language modelling",
        data=TextData,
        model=bert_run.model_of,
        load=mlm_run.MaskedLanguageModel.load,
        train=mlm.train_mlm,
        recipe=mlm.recipe,
        configure=mlm.configure,
        finish=mlm.finish,
        evaluate=mlm.evaluate_run,
        evaluates="masked-token loss, perplexity and accuracy on --text (and, for an --nsp run, the "
        "next-sentence loss and accuracy of its sentence pairs)",
        hf_family="bert",
    ),
    TaskSpec(
        name="encoder",
        archs=("encoder_only",),
        summary="a BERT encoder without a head, as imported (sentence vectors)",
        data=TextData,
        model=bert_run.model_of,
        load=encoder_run.SentenceEncoder.load,
        cannot_evaluate="an encoder run has no head to score; compare its sentence vectors with "
        "vaswani embed, or fine-tune it with vaswani train classify --init",
        hf_family="bert",
    ),
    TaskSpec(
        name="classify",
        archs=("encoder_only", "decoder_only"),
        summary="fine-tune a BERT text classifier",
        data=LabeledData,
        model=classify_run.model_of,
        load=classify_run.TextClassifier.load,
        train=classify.train_classify,
        recipe=classify.recipe,
        configure=classify.configure,
        finish=classify.finish,
        evaluate=classify.evaluate_run,
        evaluates="accuracy and macro-F1 on --labeled (TSV, CSV or JSON lines, the run's columns)",
    ),
    TaskSpec(
        name="tag",
        archs=("encoder_only",),
        summary="train a BERT token tagger (CoNLL-U, or CoNLL-2003-style columns)",
        data=TagData,
        model=tag_run.model_of,
        load=tag_run.Tagger.load,
        train=tag.train_tag,
        recipe=tag.recipe,
        configure=tag.configure,
        finish=tag.finish,
        evaluate=tag.evaluate_run,
        evaluates="accuracy, macro-F1, F1 per tag and BIO span F1 on --labeled (CoNLL-U or columns)",
    ),
    TaskSpec(
        name="image",
        archs=("vit",),
        summary="train a ViT image classifier (default: scikit-learn's digits)",
        data=ImageData,
        model=image_run.model_of,
        load=image_run.ImageClassifier.load,
        train=image.train_image,
        recipe=image.recipe,
        configure=image.configure,
        finish=image.finish,
        evaluate=image.evaluate_run,
        evaluates="accuracy and macro-F1 on --data DIR (one subfolder per class; digits: their test "
        "split), a confusion matrix written to --out",
        hf_family="vit",
    ),
)
TASKS: dict[str, TaskSpec] = {spec.name: spec for spec in ENTRIES}


def get(name: str, where: object = "") -> TaskSpec:
    """The entry of task ``name``; an unknown one is a one-line :class:`RunDirError` naming
    ``where`` it was found (a run directory) and the tasks this vaswani knows."""
    if name not in TASKS:
        prefix = f"{where}: a run directory of task {name!r}" if where else f"unknown task {name!r}"
        raise RunDirError(
            f"{prefix}, which this vaswani does not know (it knows {', '.join(TASKS)}); "
            "was it written by a newer vaswani?"
        )
    return TASKS[name]


def model_fields_skipped(spec: TaskSpec) -> tuple[str, ...]:
    """The model fields that no arch of ``spec`` reads (:data:`~vaswani.config.FAMILY_FIELDS`),
    such as a ViT's ``image_size`` for a translator: no flag of ``vaswani train TASK``."""
    return tuple(name for name, archs in FAMILY_FIELDS.items() if not set(archs) & set(spec.archs))


def trainable() -> list[TaskSpec]:
    """The tasks that ``vaswani train`` trains, in registry order."""
    return [spec for spec in TASKS.values() if spec.train is not None]


def spec_of(run_dir: str | Path, tasks: Sequence[str] | None = None, purpose: str = "") -> TaskSpec:
    """The entry of the task of ``run_dir`` (its ``config.json`` validated); with ``tasks``, a run
    of any other task is refused in one line saying what ``purpose`` needs."""
    run = RunDir(run_dir).read_config()
    spec = get(run.task, run_dir)
    if tasks is not None and spec.name not in tasks:
        raise RunDirError(
            f"{run_dir}: a run of task {spec.name!r}; {purpose} needs a run of task {' or '.join(tasks)}"
        )
    return spec


def load(run_dir: str | Path, device: str | torch.device = "auto") -> Any:
    """The wrapper of any run directory, by its task: ``vaswani.load("runs/zh").translate([...])``,
    its model on ``device`` (auto, cpu, cuda, cuda:N, mps: :func:`vaswani.runtime.resolve_device`;
    the weights are read on the CPU, then moved, so a run decodes on any device)."""
    return spec_of(run_dir).load(Path(run_dir), device=device)


def configure(
    task: str,
    flags: Sections | None = None,
    preset: str | None = None,
    config: str | Path | None = None,
    recipe: str | None = None,
) -> RunConfig:
    """The run config of a new run of ``task``, as ``vaswani train TASK`` makes it: the task's
    packaged recipe (or the one named ``recipe``) < the architecture ``preset`` < the YAML file
    ``config`` < ``flags`` ({"model": {...}, "train": {...}, "data": {...}}), then the task's rules,
    validated."""
    spec = get(task)
    if spec.recipe is None or spec.configure is None:
        raise RunDirError(f"runs of task {task!r} are not trained by vaswani")
    path = Path(config) if config else None
    return run_config(spec.recipe, spec.configure, flags or {}, preset, path, named=recipe)
