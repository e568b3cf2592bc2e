"""The task registry: one entry per task, and everything that dispatches on a task asks it.

An entry (:class:`TaskSpec`) names the task's model builder, its training function (the trainer's
:class:`~vaswani.training.trainer.Task` adapter inside it), the wrapper that uses a trained run
(``Translator``, ``LanguageModel``...), its ``evaluate`` and attention hooks and its Hugging Face
family. The command line (``train``, ``evaluate``, ``plot``, ``attention``, ``average``),
``import-hf``/``export-hf`` and the Python API (:func:`load`, :func:`resume`) find a task here, so
that a new task is one model module, one adapter module and one entry in :data:`TASKS`.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vaswani.config import RunConfig
from vaswani.data.config import DataConfig, LabeledData, LMData, ParallelData, TextData
from vaswani.errors import RunDirError, TrainingInterrupted, VaswaniError
from vaswani.recipes import Sections
from vaswani.rundir import RunDir, RunLock
from vaswani.tasks import (
    bert,
    classify,
    encoder,
    image,
    image_data,
    lm,
    mlm,
    nat,
    nat_translator,
    tag,
    translation,
    translator,
)
from vaswani.tasks.attention import (
    AttentionMap,
    ImageAttention,
    image_attention,
    titled_bert_attention,
    titled_lm_attention,
    titled_translation_attention,
)
from vaswani.tasks.evaluation import Evaluation
from vaswani.tasks.settings import run_config
from vaswani.training import distributed
from vaswani.training.checkpoint import checkpoint_problem, list_checkpoints
from vaswani.training.state import restored_state


@dataclass(frozen=True)
class TaskSpec:
    """One task. ``data`` is the class of its runs' data section; ``model`` builds the untrained
    model of a run config; ``load(run_dir, device=...)`` reads a run directory into the task's
    wrapper, its model on that device;
    ``train(run, run_dir, resume, quiet)`` trains or continues a run and returns
    ``(metrics, wrapper, ...)`` (None: runs of this task are imported, not trained);
    ``recipe(flags)`` names the packaged recipe a new run starts from (:mod:`vaswani.recipes`),
    ``configure(sections, flags, source)`` applies the task's rules and validates
    (:mod:`vaswani.tasks.settings`), ``finish(result, run_dir, started, quiet)`` does what follows
    training and returns the report's lines; ``evaluate(run_dir, request)`` scores a run and
    returns the lines to print, ``evaluates`` says what it scores and on which inputs (None:
    ``cannot_evaluate`` says why and what to do instead);
    ``attention(wrapper, text, part)`` gives the attention maps of one input (of the part that
    ``--part`` names; None: the default) and a title; ``hf_family`` names the Hugging Face family that
    ``export-hf`` writes (:mod:`vaswani.interop`)."""

    name: str
    summary: str
    data: type[DataConfig]
    model: Callable[[RunConfig], nn.Module]
    load: Callable[..., Any]
    train: Callable[..., tuple[Any, ...]] | None = None
    recipe: Callable[[Sections], str] | None = None
    configure: Callable[[Sections, Sections, str], RunConfig] | None = None
    finish: Callable[[Any, Path, float, bool], list[str]] | None = None
    evaluate: Callable[[Path, Evaluation], list[str]] | None = None
    evaluates: str = ""
    cannot_evaluate: str = ""
    attention: Callable[[Any, str, str | None], tuple[list[AttentionMap] | ImageAttention, str]] | None = None
    hf_family: str | None = None


TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec(
            "lm", "train a decoder-only language model (GPT)", LMData, lm.model_of, lm.LanguageModel.load,
            lm.train_lm, lm.recipe, lm.configure, lm.finish, lm.evaluate_run,
            evaluates="loss and perplexity on --text", attention=titled_lm_attention, hf_family="gpt2",
        ),
        TaskSpec(
            "translation", "train an encoder-decoder translator", ParallelData, translation.model_of,
            translator.Translator.load, translation.train_translation, translation.recipe,
            translation.configure, translation.finish, translation.evaluate_run,
            evaluates="BLEU and chrF on --src and --ref (default: its own test split), the hypotheses "
            "written to --out", attention=titled_translation_attention, hf_family="marian",
        ),
        TaskSpec(
            "nat", "train a non-autoregressive translator (CMLM, decoded by Mask-Predict)",
            nat_translator.NatData, nat.model_of, nat_translator.NatTranslator.load, nat.train_nat,
            nat.recipe, nat.configure, nat.finish, nat.evaluate_run,
            evaluates="BLEU and chrF by Mask-Predict (T = 10, l = 5) on --src and --ref (default: its own "
            "test split), the hypotheses written to --out",
        ),
        TaskSpec(
            "mlm", "pretrain a BERT by masked language modelling", TextData, bert.model_of,
            mlm.MaskedLanguageModel.load, mlm.train_mlm, mlm.recipe, mlm.configure, mlm.finish,
            mlm.evaluate_run, evaluates="masked-token loss, perplexity and accuracy on --text (and, for an "
            "--nsp run, the next-sentence loss and accuracy of its sentence pairs)",
            attention=titled_bert_attention, hf_family="bert",
        ),
        TaskSpec(
            "encoder", "a BERT encoder without a head, as imported (sentence vectors)", TextData,
            bert.model_of, encoder.SentenceEncoder.load,
            cannot_evaluate="an encoder run has no head to score; compare its sentence vectors with "
            "vaswani embed, or fine-tune it with vaswani train classify --init",
            attention=titled_bert_attention, hf_family="bert",
        ),
        TaskSpec(
            "classify", "fine-tune a BERT text classifier", LabeledData, classify.model_of,
            classify.TextClassifier.load, classify.train_classify, classify.recipe, classify.configure,
            classify.finish, classify.evaluate_run,
            evaluates="accuracy and macro-F1 on --labeled (TSV, CSV or JSON lines, the run's columns)",
            attention=titled_bert_attention,
        ),
        TaskSpec(
            "tag", "train a BERT token tagger (CoNLL-U, or CoNLL-2003-style columns)", tag.TagData,
            tag.model_of, tag.Tagger.load, tag.train_tag, tag.recipe, tag.configure, tag.finish,
            tag.evaluate_run, attention=titled_bert_attention,
            evaluates="accuracy, macro-F1, F1 per tag and BIO span F1 on --labeled (CoNLL-U or columns)",
        ),
        TaskSpec(
            "image", "train a ViT image classifier (default: scikit-learn's digits)", image_data.ImageData,
            image.model_of, image.ImageClassifier.load, image.train_image, image.recipe, image.configure,
            image.finish, image.evaluate_run,
            evaluates="accuracy and macro-F1 on --data DIR (one subfolder per class; digits: their test "
            "split), a confusion matrix written to --out", attention=image_attention, hf_family="vit",
        ),
    )
}  # fmt: skip


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


def resume(
    run_dir: str | Path, quiet: bool = False, task: str | None = None, **train_changes: Any
) -> tuple[Any, ...]:
    """Continue the stopped run ``run_dir`` from its newest intact checkpoint, with its own saved
    config (with ``task``, a run of another task is refused). ``train_changes`` (e.g.
    ``max_steps=...``) may extend it; they are saved in the config, so that a later plain resume
    keeps them. Returns what the task's training returns."""
    with resumed_run(run_dir, task, **train_changes) as (spec, run):
        assert spec.train is not None
        return spec.train(run, Path(run_dir), resume=True, quiet=quiet)


@contextlib.contextmanager
def resumed_run(
    run_dir: str | Path, task: str | None = None, **train_changes: Any
) -> Iterator[tuple[TaskSpec, RunConfig]]:
    """The entry and the config (with ``train_changes``) of the stopped run ``run_dir``, held
    (:meth:`RunDir.lock`, by the main process) for the block. A run already at its step or time
    budget is refused in one line, before any data is read."""
    folder = RunDir(run_dir)
    spec = get(folder.read_config(task).task, run_dir)
    run = folder.read_config(task, spec.data)
    if spec.train is None:
        raise RunDirError(
            f"{run_dir}: a run of task {spec.name!r} is not trained by vaswani; nothing to resume"
        )
    if "max_steps" in train_changes:  # a new step budget replaces a budget of epochs
        train_changes = {"epochs": None, **train_changes}
    resumed = RunConfig(run.task, run.model, run.train.replace(**train_changes), run.data)
    place, _ = distributed.start(resumed.train.device)

    def take() -> RunLock:
        folder.check_not_held()  # a run in use is said first; then refusals that leave it as it was
        budget_left(folder.path, resumed)
        return folder.lock()

    with _held(place, take):
        yield spec, resumed


def budget_left(run_dir: Path, run: RunConfig) -> None:
    """Refuse, in one line, a resume of a run whose newest intact checkpoint is already at
    ``max_steps`` (or past ``max_minutes``): it would train nothing."""
    train = run.train
    for path in reversed(list_checkpoints(run_dir)):
        step = int(path.name.removeprefix("step_"))
        if step < train.max_steps and train.max_minutes is None:
            return
        if checkpoint_problem(path) is not None:  # newest_intact_checkpoint says so, and goes on
            continue
        file = path / "trainer_state.json"  # intact: as it was written
        try:
            state = restored_state(json.loads(file.read_text(encoding="utf-8")), file)
        except OSError:  # removed meanwhile: the run is trained by another process, which the lock finds
            continue
        step, minutes = state.step, state.train_seconds / 60
        if step >= train.max_steps:
            raise RunDirError(
                f"{run_dir}: already at step {step} of max_steps {train.max_steps}: nothing to train; "
                f"give --max-steps above {step} to train more"
            )
        if train.max_minutes is not None and minutes >= train.max_minutes:
            raise RunDirError(
                f"{run_dir}: already trained {minutes:.2f} minutes of max_minutes {train.max_minutes}: "
                "nothing to train; give a larger --max-minutes to train more"
            )
        return


@contextlib.contextmanager
def _held(place: distributed.World, take: Callable[[], RunLock]) -> Iterator[RunLock | None]:
    """``take()`` (a run directory's lock) in the main process, its refusal told to every process;
    the lock (None in the others) is let go after the block."""
    lock, error = None, None
    if place.main:
        try:
            lock = take()
        except VaswaniError as exc:
            error = str(exc)
    error = distributed.from_main(place, error)
    if error is not None:
        raise RunDirError(error)
    try:
        yield lock
    finally:
        if lock is not None:
            lock.release()


def configure(
    task: str, flags: Sections | None = None, preset: str | None = None, config: str | Path | None = None
) -> RunConfig:
    """The run config of a new run of ``task``, as ``vaswani train TASK`` makes it: the task's
    packaged recipe < the architecture ``preset`` < the YAML file ``config`` < ``flags``
    ({"model": {...}, "train": {...}, "data": {...}}), then the task's rules, validated."""
    spec = get(task)
    if spec.recipe is None or spec.configure is None:
        raise RunDirError(f"runs of task {task!r} are not trained by vaswani")
    return run_config(spec.recipe, spec.configure, flags or {}, preset, Path(config) if config else None)


@contextlib.contextmanager
def new_run(out: str | Path | None, task: str, device: str = "auto") -> Iterator[Path]:
    """The directory of a new run of ``task``: ``out`` (new or empty; default
    ``runs/TASK-DATE-TIME``), made and held for the block (:meth:`RunDir.create`) before any data
    is read. Under several processes the main one makes it and tells the others (after joining
    the process group for ``device``). A failure in the block leaves no unusable run: one without
    a checkpoint is removed (once training had begun, its error, or a note, says so); one with a
    checkpoint stays, and its error (or a note, after a KeyboardInterrupt) says how to resume it."""
    place, _ = distributed.start(device)
    chosen: list[Path] = []

    def create() -> RunLock:
        folder, lock = RunDir.create(Path(out) if out is not None else None, task)
        chosen.append(folder.path)
        return lock

    with _held(place, create) as lock:
        path = distributed.from_main(place, str(chosen[0]) if chosen else None)
        try:
            yield Path(path)
        except BaseException as exc:
            said = _after_failure(RunDir(path), lock, task, exc) if lock is not None else None
            if said is None:
                raise
            if isinstance(exc, VaswaniError) and not isinstance(exc, TrainingInterrupted):
                raise type(exc)(f"{exc}; {said}") from None  # still one line
            print(f"vaswani: note: {said}", file=sys.stderr)
            raise


def _after_failure(folder: RunDir, lock: RunLock, task: str, exc: BaseException) -> str | None:
    """Remove a new run that failed before its first checkpoint; what became of it, where that
    is news (None: nothing had been written but the empty folder, or the run is finished or
    interrupted with a checkpoint, which its own message says)."""
    begun = folder.config_path.is_file()
    if folder.remove_stub(lock):
        return f"removed {folder}: it had no checkpoint to resume from" if begun else None
    if folder.path.is_dir() and not (isinstance(exc, TrainingInterrupted) or folder.metrics_path.is_file()):
        return f"{folder} keeps its checkpoints; continue with: vaswani train {task} --resume {folder}"
    return None


def train(run: RunConfig, out: str | Path | None = None, quiet: bool = False) -> tuple[Any, ...]:
    """Train a new run of ``run.task`` in ``out`` (:func:`new_run`) and return what the task's
    training returns (metrics first, then the trained wrapper). Under several processes (torchrun)
    every one calls it."""
    spec = get(run.task)
    if spec.train is None:
        raise RunDirError(f"runs of task {run.task!r} are not trained by vaswani")
    with new_run(out, run.task, run.train.device) as run_dir:
        return spec.train(run, run_dir, resume=False, quiet=quiet)
