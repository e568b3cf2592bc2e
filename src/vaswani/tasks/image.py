"""Image classification with a ViT (:mod:`vaswani.models.vit`): the task adapter; a run in use is
:class:`vaswani.pipelines.image.ImageClassifier`.

The images (scikit-learn's digits or a folder) and their batches are :mod:`vaswani.data.image_sets`'s.
Every image is resized, rescaled and normalised as Hugging Face's ``ViTImageProcessor`` does
(:class:`~vaswani.data.images.ImageProcessing`, saved in the run as ``preprocessor_config.json`` and
used again by ``classify-image``). Training minimises the cross-entropy of the gold class (with the
run's label smoothing); the validation split is scored by loss, accuracy and macro-F1.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.config import RunConfig, TrainConfig
from vaswani.data.config import DIGITS, ImageData
from vaswani.data.image_sets import ImageBatch, ImageBatches, Images, Splits, fixed_batches, load_images
from vaswani.data.images import ImageProcessing, load_folder, scan_folder
from vaswani.errors import ConfigError
from vaswani.models.vit import ViT
from vaswani.pipelines.image import TASK, ImageClassifier, model_of, processing_of, scores
from vaswani.recipes import Sections
from vaswani.resources import check_fits
from vaswani.rundir import RunDir
from vaswani.runtime import Resolved
from vaswani.tasks.evaluation import Confusion, Evaluation, Report
from vaswani.tasks.finetune import epoch_settings
from vaswani.tasks.settings import absolute, one_stack, validated
from vaswani.training.distributed import world
from vaswani.training.trainer import fit_run

CONFUSION = "confusion_matrix.png"
INIT_FREE = ("dropout", "attn_dropout", "drop_path")  # what a run started from --init may change


class ImageTask:
    """Cross-entropy of the gold class (``label_smoothing``), ``batch_size`` images a batch; on the
    validation split the loss, accuracy and macro-F1."""

    def __init__(self, run: RunConfig, processing: ImageProcessing, splits: Splits) -> None:
        self.smoothing = run.train.label_smoothing
        self.batches = ImageBatches(splits.train, processing, run.train.batch_size, run.train.seed, run.data)
        self.valid = fixed_batches(splits.valid, processing, run.train.batch_size)

    def train_batches(self) -> ImageBatches:
        return self.batches

    def loss(self, model: nn.Module, batch: ImageBatch) -> tuple[Tensor, int]:
        logits = model(batch.pixels).float()
        loss = F.cross_entropy(logits, batch.labels, reduction="sum", label_smoothing=self.smoothing)
        return loss, len(batch.labels)

    def batch_tokens(self, batch: ImageBatch) -> int:
        return len(batch.labels)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return scores(model, self.valid)[0]


def with_pretrained(build: Callable[[], ViT], init: Path) -> Callable[[], ViT]:
    """``build`` followed by copying the encoder of the image run ``init`` into the model: every
    weight but the classifier, which stays freshly initialised (the classes are the new data's)."""

    def built() -> ViT:
        model = build()
        pretrained = RunDir(init).load_weights(model_of(RunDir(init).read_config(TASK, ImageData)))
        encoder = {k: v for k, v in pretrained.state_dict().items() if not k.startswith("head.")}
        missing, unexpected = model.load_state_dict(encoder, strict=False)
        if unexpected or any(not k.startswith("head.") for k in missing):
            raise ConfigError(f"--init {init}: its ViT does not fit this model (missing {missing})")
        return model

    return built


def train_image(
    run: RunConfig, run_dir: Path, resume: bool = False, quiet: bool = False, device: Resolved = None
) -> tuple[dict[str, Any], ImageClassifier]:
    """Train (or, with ``resume``, continue) an image classifier in ``run_dir``; return the metrics
    and the classifier. The run directory keeps the classes (``config.json``) and the
    preprocessing (``preprocessor_config.json``)."""
    init = None if resume or run.data.init is None else Path(run.data.init)
    if resume:
        processing = ImageProcessing.load(run_dir)
    else:
        processing = processing_of(run) if init is None else ImageProcessing.load(init)
    check_fits(run.model, training=True)  # before the images are read at the model's size
    splits = load_images(run.data, processing, quiet=not world().main)
    if not resume:
        run = RunConfig(run.task, run.model, run.train, run.data.replace(classes=splits.classes))
    task = ImageTask(run, processing, splits)

    def build() -> ViT:
        return model_of(run)

    maker = build if init is None else with_pretrained(build, init)
    metrics, model = fit_run(run, run_dir, task, maker, processing.save, resume, quiet, device=device)
    classifier = ImageClassifier(model.eval(), processing, run.data)
    if splits.test is not None:
        test, _, _ = classifier.evaluate(splits.test, run.train.batch_size)
        metrics = {**metrics, **{k.replace("valid_", "test_"): v for k, v in test.items()}}
        if world().main:
            RunDir(run_dir).write_metrics(metrics)
    return metrics, classifier


def evaluate_run(run_dir: Path, request: Evaluation) -> Report:
    """Accuracy and macro-F1 of an ``image`` run on ``request.images`` (a folder of the run's
    classes; a digits run: its own test split without it), and its confusion matrix, to be drawn
    at ``request.out`` (default ``RUN_DIR/confusion_matrix.png``)."""
    classifier = ImageClassifier.load(run_dir, request.device)
    if request.images is not None:
        found = load_folder(request.images, classifier.processing, classes=classifier.classes)
        images, name = Images(found.pixels, found.labels), str(request.images)
    elif classifier.data.source == "digits":
        images = load_images(classifier.data, classifier.processing, quiet=True).test
        assert images is not None
        name = "the digits' test split"
    else:
        raise ConfigError("an image classifier is evaluated with --data DIR (one subfolder per class)")
    metrics, predicted, gold = classifier.evaluate(images, request.batch_size)
    line = (
        f"accuracy {metrics['valid_accuracy']:.1%}  macro-F1 {metrics['valid_macro_f1']:.3f}  "
        f"loss {metrics['valid_loss']:.4f}  ({len(gold)} images of {name})"
    )
    out, title = request.out or run_dir / CONFUSION, f"{run_dir.name} on {name}"
    return Report([line], Confusion(predicted.tolist(), gold.tolist(), classifier.classes, out, title))


def recipe(flags: Sections) -> str:
    """The digits recipe, the folder one once ``--data`` is given, the fine-tuning one with ``--init``."""
    data = flags.get("data", {})
    if data.get("init") is not None:
        return "image-init"
    return "image-folder" if data.get("data_dir") is not None else "image"


def pretrained_model(sections: Sections, flags: Sections, source: str) -> dict[str, Any]:
    """The model section of a run that starts from ``--init RUN_DIR``: that run's model, with only
    the regularisation (``INIT_FREE``: dropout, drop-path) changed by the flags or a config file.
    Another model field is refused, naming it."""
    init = Path(sections["data"]["init"])
    pretrained = RunDir(init).read_config(TASK, ImageData).model.to_dict()
    given = {**sections.get("model", {}), **flags.get("model", {})}
    fixed = [name for name, value in given.items() if name not in INIT_FREE and value != pretrained.get(name)]
    if fixed:
        raise ConfigError(
            f"{source}: config field 'model.{fixed[0]}': the model of an --init run is fixed "
            f"(only {', '.join(INIT_FREE)} may change)"
        )
    return {**pretrained, **{name: given[name] for name in INIT_FREE if name in given}}


def configure(sections: Sections, flags: Sections, source: str) -> RunConfig:
    """An image run: ``--data`` read as the folder source and stored absolute, a ViT model, and
    the steps, warmup (10%) and evaluation interval (once an epoch) taken from the epochs where
    they are not given (counting the training images: a folder is scanned for them)."""
    data = sections.setdefault("data", {})
    if data.get("data_dir") is not None:
        data["source"] = "folder"
    absolute(data, ("data_dir", "init"))
    if data.get("init") is not None:
        sections["model"] = pretrained_model(sections, flags, source)
    one_stack(sections.setdefault("model", {}), "vit", source)
    spec = ImageData.from_dict(data, source=source)
    train = sections.setdefault("train", {})
    checked = TrainConfig.from_dict(train, source=source)
    if checked.epochs is not None:
        if spec.source == "digits":
            n = DIGITS - round(spec.test_fraction * DIGITS) - round(spec.valid_fraction * DIGITS)
        else:
            assert spec.data_dir is not None
            total = len(scan_folder(spec.data_dir).files)
            n = total - max(1, round(spec.valid_fraction * total))
        sections["train"] = epoch_settings(train, n, checked.batch_size, checked.epochs)
    return validated(TASK, sections, ImageData, source)


def finish(
    result: tuple[dict[str, Any], ImageClassifier], run_dir: Path, started: float, quiet: bool
) -> list[str]:
    """The report after training: the test scores (digits) or the validation scores."""
    metrics, _ = result
    split = "test" if "test_accuracy" in metrics else "valid"
    accuracy, macro_f1, loss = (metrics[f"{split}_{name}"] for name in ("accuracy", "macro_f1", "loss"))
    return [
        f"\n{split} accuracy {accuracy:.1%}  macro-F1 {macro_f1:.3f}  loss {loss:.3f}  "
        f"({metrics['steps']} steps, {metrics['tokens_per_second']:,.0f} images/s, "
        f"total {time.perf_counter() - started:.0f} s)",
        f"\nrun directory: {run_dir}\n  vaswani classify-image {run_dir} IMAGE...",
    ]
