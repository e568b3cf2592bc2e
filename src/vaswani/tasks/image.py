"""Image classification with a ViT (:mod:`vaswani.models.vit`): the task adapter and the classifier
that uses a run.

The images come from scikit-learn's 8 × 8 handwritten digits (shipped with it: no download; 1,797
images of 10 classes, their 0-16 ink values written as 8-bit grey, round(v · 255 / 16)) or from a
folder of one subfolder per class (``--data DIR``, the ImageFolder layout, read by
:mod:`vaswani.data.images`). A fixed ``valid_fraction`` of them is held out for validation, and of
the digits also a fixed ``test_fraction`` for the test that follows training (both drawn with the
data ``seed``). Every image is resized, rescaled and normalised as Hugging Face's
``ViTImageProcessor`` does (:class:`~vaswani.data.images.ImageProcessing`, saved in the run as
``preprocessor_config.json`` and used again by ``classify-image``); training images may then be
augmented: a random resized crop (``crop_scale``: the smallest area kept) and a left-right flip,
drawn from torch's random state, which checkpoints keep, so that a resumed run sees the same.

Training minimises the cross-entropy of the gold class (with the run's label smoothing); the
validation split is scored by loss, accuracy and macro-F1.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from PIL import Image
from torch import Tensor, nn

from vaswani.config import RunConfig, TrainConfig
from vaswani.data.config import DataConfig
from vaswani.data.images import (
    ImageProcessing,
    image_tensor,
    load_folder,
    random_flip,
    random_resized_crop,
    read_image,
    scan_folder,
)
from vaswani.errors import ConfigError
from vaswani.metrics import accuracy_and_macro_f1
from vaswani.models.vit import ViT
from vaswani.recipes import Sections
from vaswani.rundir import RunDir
from vaswani.runtime import resolve_device
from vaswani.schema import flag, no_flag
from vaswani.tasks.evaluation import Evaluation, on_model_device
from vaswani.tasks.finetune import epoch_settings
from vaswani.tasks.settings import absolute, one_stack, validated
from vaswani.training.distributed import world
from vaswani.training.trainer import fit_run

TASK = "image"
DIGITS = 1797  # images in scikit-learn's digits
CONFUSION = "confusion_matrix.png"


@dataclass(frozen=True)
class ImageData(DataConfig):
    """Images for a classifier: scikit-learn's digits (``source="digits"``) or the folder
    ``data_dir`` (``source="folder"``); ``classes`` are the class names in order (the digits' 0-9,
    or the folder's subfolders, sorted)."""

    source: str = no_flag("digits")
    data_dir: str | None = flag(
        None, "a folder of one subfolder of images per class (default: scikit-learn's digits)", flag="--data"
    )
    seed: int = flag(0, "seed of the held-out splits", flags=("--data-seed",), range="[0, 4294967296)")
    valid_fraction: float = flag(0.1, "images held out for validation (default 0.1)", range="(0, 0.5)")
    test_fraction: float = flag(
        0.2, "digits held out for the test after training (default 0.2)", range="(0, 0.5)"
    )
    crop_scale: float | None = flag(
        None,
        "random resized crops of at least this fraction of the area (default: none)",
        flag="--random-crop",
        metavar="MIN",
        range="(0, 1]",
    )
    flip: bool = flag(False, "mirror training images left-right at random")
    skip_bad_images: bool = flag(False, "skip (and count) unreadable image files")
    classes: tuple[str, ...] | None = no_flag(None)

    def _check(self) -> None:
        self._one_of("source", ("digits", "folder"))
        if self.source == "folder" and self.data_dir is None:
            self._fail("data_dir", "source 'folder' needs the image folder (--data DIR)")
        if self.classes is not None and (len(self.classes) < 2 or len(set(self.classes)) < len(self.classes)):
            self._fail("classes", f"two or more distinct classes, got {list(self.classes)}")


@dataclass
class Images:
    """Images resized but not yet normalised: ``pixels`` uint8 (n, C, H, W), ``labels`` (n,)."""

    pixels: Tensor
    labels: Tensor

    def take(self, indices: Tensor) -> Images:
        return Images(self.pixels[indices], self.labels[indices])


@dataclass
class Splits:
    """The training, validation and (digits) test images of a run, and the class names."""

    train: Images
    valid: Images
    test: Images | None
    classes: tuple[str, ...]


@dataclass
class ImageBatch:
    """Model inputs ``pixels`` float32 (batch, C, H, W) and the gold class ids ``labels`` (batch,)."""

    pixels: Tensor
    labels: Tensor


def processing_of(run: RunConfig) -> ImageProcessing:
    """A new run's preprocessing: a resize to the model's ``image_size`` (bilinear), pixels / 255,
    then (x − 0.5) / 0.5 per channel: ``ViTImageProcessor``'s defaults."""
    size, channels = run.model.image_size, run.model.channels
    return ImageProcessing(size=(size, size), image_mean=(0.5,) * channels, image_std=(0.5,) * channels)


def digit_images(processing: ImageProcessing) -> Images:
    """scikit-learn's digits as 8-bit grey images, resized by ``processing``."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    grey = (digits.images * 255 / 16).round().astype("uint8")
    pixels = [image_tensor(processing.resize(Image.fromarray(image))) for image in grey]
    return Images(torch.stack(pixels), torch.from_numpy(digits.target).long())


def held_out(n: int, fractions: Sequence[float], seed: int) -> list[Tensor]:
    """Indices of ``n`` items in ``len(fractions) + 1`` disjoint parts drawn at random by ``seed``:
    one of round(f · n) items (at least 1) per fraction, then the rest."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    parts, start = [], 0
    for fraction in fractions:
        size = max(1, round(fraction * n))
        parts.append(order[start : start + size])
        start += size
    return [*parts, order[start:]]


def load_images(spec: ImageData, processing: ImageProcessing, quiet: bool = False) -> Splits:
    """The splits of a run's images: the digits' test and validation parts, or the folder's
    validation part, the rest for training. Unreadable files skipped (``skip_bad_images``) are
    counted in one line on standard error (unless ``quiet``: the evaluation of a digits run)."""
    if spec.source == "digits":
        images, classes = digit_images(processing), tuple(str(d) for d in range(10))
        test, valid, train = held_out(
            len(images.labels), (spec.test_fraction, spec.valid_fraction), spec.seed
        )
        return Splits(images.take(train), images.take(valid), images.take(test), classes)
    assert spec.data_dir is not None
    found = load_folder(spec.data_dir, processing, spec.skip_bad_images, spec.classes)
    if found.skipped and not quiet:
        print(
            f"vaswani: skipped {len(found.skipped)} unreadable image file(s), e.g. {found.skipped[0]}",
            file=sys.stderr,
        )
    images = Images(found.pixels, found.labels)
    valid, train = held_out(len(images.labels), (spec.valid_fraction,), spec.seed)
    return Splits(images.take(train), images.take(valid), None, found.classes)


class ImageBatches(Sequence[ImageBatch]):
    """The training batches of :class:`ImageTask`: fixed groups of ``batch_size`` images (shuffled
    once by ``seed``), each normalised when read and, if asked, augmented with draws from torch's
    random state (a random resized crop of at least ``crop_scale`` of the area, a flip)."""

    def __init__(
        self, images: Images, processing: ImageProcessing, batch_size: int, seed: int, spec: ImageData
    ) -> None:
        self.images, self.processing, self.spec = images, processing, spec
        order = torch.randperm(len(images.labels), generator=torch.Generator().manual_seed(seed))
        self.groups = list(order.split(batch_size))

    def __len__(self) -> int:
        return len(self.groups)

    def __getitem__(self, i: int) -> ImageBatch:  # type: ignore[override]
        chosen = self.images.take(self.groups[i])
        pixels = self.processing.normalize(chosen.pixels)
        if self.spec.crop_scale is not None or self.spec.flip:
            generator = torch.Generator().manual_seed(int(torch.randint(2**62, (1,))))
            if self.spec.crop_scale is not None:
                size = (pixels.shape[2], pixels.shape[3])
                pixels = random_resized_crop(pixels, size, generator, (self.spec.crop_scale, 1.0))
            if self.spec.flip:
                pixels = random_flip(pixels, generator)
        return ImageBatch(pixels, chosen.labels)


def fixed_batches(images: Images, processing: ImageProcessing, batch_size: int) -> list[ImageBatch]:
    """``images`` in order, normalised, ``batch_size`` a batch (for scoring)."""
    return [
        ImageBatch(processing.normalize(images.pixels[i : i + batch_size]), images.labels[i : i + batch_size])
        for i in range(0, len(images.labels), batch_size)
    ]


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


@torch.no_grad()
def scores(model: nn.Module, batches: Sequence[ImageBatch]) -> tuple[dict[str, float], Tensor, Tensor]:
    """Mean cross-entropy, accuracy and macro-F1 of ``model`` on ``batches`` (run on the model's
    device), and the predicted and gold class ids (n,)."""
    total, predicted, gold = 0.0, [], []
    for batch in batches:
        on = on_model_device(model, batch)
        logits = model(on.pixels).float()
        total += float(F.cross_entropy(logits, on.labels, reduction="sum"))
        predicted.append(logits.argmax(dim=-1).cpu())
        gold.append(batch.labels)
    accuracy, macro_f1 = accuracy_and_macro_f1(torch.cat(predicted), torch.cat(gold))
    count = sum(len(labels) for labels in gold)
    metrics = {"valid_loss": total / count, "valid_accuracy": accuracy, "valid_macro_f1": macro_f1}
    return metrics, torch.cat(predicted), torch.cat(gold)


class ImageClassifier:
    """A trained image classifier with its preprocessing and class names:
    ``ImageClassifier.load(run_dir).predict(["a.png"])``."""

    def __init__(self, model: ViT, processing: ImageProcessing, data: ImageData) -> None:
        if data.classes is None:
            raise ConfigError("config field 'data.classes': an image classifier run needs its classes")
        self.model, self.processing, self.data = model, processing, data
        self.classes: tuple[str, ...] = data.classes

    @classmethod
    def load(cls, run_dir: str | Path, device: str | torch.device = "auto") -> ImageClassifier:
        """The classifier of an ``image`` run on ``device`` (the weights read on the CPU, then moved)."""
        where = resolve_device(device)
        run = RunDir(run_dir).read_config(TASK, ImageData)
        processing = ImageProcessing.load(Path(run_dir))
        model = RunDir(run_dir).load_weights(model_of(run)).to(where)
        return cls(model.eval(), processing, run.data)

    def pixels(self, paths: Sequence[str | Path]) -> Tensor:
        """The model inputs (n, C, H, W) of the image files ``paths``, read and preprocessed as in
        training; a file that is not a readable image is a one-line error naming it."""
        images = [read_image(path, self.processing.channels) for path in paths]
        return self.processing.pixel_values(images)

    @torch.no_grad()
    def probabilities(self, paths: Sequence[str | Path], batch_size: int = 64) -> Tensor:
        """p(class | image) (n, n_classes) of each image file, on the CPU."""
        self.model.eval()
        out = []
        for start in range(0, len(paths), batch_size):
            pixels = on_model_device(self.model, self.pixels(paths[start : start + batch_size]))
            out.append(self.model(pixels).float().softmax(dim=-1).cpu())
        return torch.cat(out) if out else torch.empty(0, len(self.classes))

    def predict(self, paths: Sequence[str | Path], top_k: int = 1) -> list[list[tuple[str, float]]]:
        """The ``top_k`` most likely classes of each image file, with their probabilities."""
        probs, best = self.probabilities(paths).topk(min(top_k, len(self.classes)), dim=-1)
        return [
            [(self.classes[i], p) for i, p in zip(row_i, row_p, strict=True)]
            for row_i, row_p in zip(best.tolist(), probs.tolist(), strict=True)
        ]

    def evaluate(self, images: Images, batch_size: int = 64) -> tuple[dict[str, float], Tensor, Tensor]:
        """Loss, accuracy, macro-F1, predicted and gold class ids on ``images`` (resized, uint8)."""
        self.model.eval()
        return scores(self.model, fixed_batches(images, self.processing, batch_size))


def model_of(run: RunConfig) -> ViT:
    """The (untrained) model of an ``image`` run."""
    if run.data.classes is None:
        raise ConfigError("config field 'data.classes': an image classifier run needs its classes")
    return ViT(run.model, len(run.data.classes))


def train_image(
    run: RunConfig, run_dir: Path, resume: bool = False, quiet: bool = False
) -> tuple[dict[str, Any], ImageClassifier]:
    """Train (or, with ``resume``, continue) an image classifier in ``run_dir``; return the metrics
    and the classifier. The run directory keeps the classes (``config.json``) and the
    preprocessing (``preprocessor_config.json``)."""
    processing = ImageProcessing.load(run_dir) if resume else processing_of(run)
    splits = load_images(run.data, processing, quiet=not world().main)
    if not resume:
        run = RunConfig(run.task, run.model, run.train, run.data.replace(classes=splits.classes))
    task = ImageTask(run, processing, splits)
    metrics, model = fit_run(run, run_dir, task, lambda: model_of(run), processing.save, resume, quiet)
    classifier = ImageClassifier(model.eval(), processing, run.data)
    if splits.test is not None:
        test, _, _ = classifier.evaluate(splits.test, run.train.batch_size)
        metrics = {**metrics, **{k.replace("valid_", "test_"): v for k, v in test.items()}}
        if world().main:
            RunDir(run_dir).write_metrics(metrics)
    return metrics, classifier


def evaluate_run(run_dir: Path, request: Evaluation) -> list[str]:
    """Accuracy and macro-F1 of an ``image`` run on ``request.images`` (a folder of the run's
    classes; a digits run: its own test split without it), and a confusion-matrix picture drawn by
    ``request.confusion_figure`` to ``request.out`` (default ``RUN_DIR/confusion_matrix.png``)."""
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
    lines = [
        f"accuracy {metrics['valid_accuracy']:.1%}  macro-F1 {metrics['valid_macro_f1']:.3f}  "
        f"loss {metrics['valid_loss']:.4f}  ({len(gold)} images of {name})"
    ]
    if request.confusion_figure is not None:
        out = request.out or run_dir / CONFUSION
        title = f"{run_dir.name} on {name}"
        request.confusion_figure(predicted.tolist(), gold.tolist(), classifier.classes, out, title)
        lines.append(f"confusion matrix: {out}")
    return lines


def recipe(flags: Sections) -> str:
    """The digits recipe, or the folder one once ``--data`` is given."""
    return "image-folder" if flags.get("data", {}).get("data_dir") is not None else "image"


def configure(sections: Sections, flags: Sections, source: str) -> RunConfig:
    """An image run: ``--data`` read as the folder source and stored absolute, a ViT model, and
    the steps, warmup (10%) and evaluation interval (once an epoch) taken from the epochs where
    they are not given (counting the training images: a folder is scanned for them)."""
    data = sections.setdefault("data", {})
    if data.get("data_dir") is not None:
        data["source"] = "folder"
    absolute(data, ("data_dir",))
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
