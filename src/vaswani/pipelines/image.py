"""An ``image`` run in use: the ViT its config builds, its preprocessing, and
:class:`ImageClassifier`, which classifies image files and scores a set of images.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.config import RunConfig
from vaswani.data.config import ImageData
from vaswani.data.image_sets import ImageBatch, Images, fixed_batches
from vaswani.data.images import ImageProcessing, read_image
from vaswani.errors import ConfigError
from vaswani.metrics import accuracy_and_macro_f1
from vaswani.models.vit import ViT
from vaswani.pipelines.common import on_model_device
from vaswani.rundir import RunDir
from vaswani.runtime import resolve_device

TASK = "image"


def processing_of(run: RunConfig) -> ImageProcessing:
    """A new run's preprocessing: a resize to the model's ``image_size`` (bilinear), pixels / 255,
    then (x − 0.5) / 0.5 per channel: ``ViTImageProcessor``'s defaults."""
    size, channels = run.model.image_size, run.model.channels
    return ImageProcessing(size=(size, size), image_mean=(0.5,) * channels, image_std=(0.5,) * channels)


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
        if not data.classes:
            raise ConfigError(
                "config field 'data.classes': this ViT has no classifier (an imported ViTModel); "
                "fine-tune one with: vaswani train image --init RUN_DIR --data DIR"
            )
        self.model, self.processing, self.data = model, processing, data
        self.classes: tuple[str, ...] = data.classes

    @classmethod
    def load(cls, run_dir: str | Path, device: str | torch.device = "auto") -> ImageClassifier:
        """The classifier of an ``image`` run on ``device`` (the weights read on the CPU, then moved)."""
        where = resolve_device(device)
        run = RunDir(run_dir).read_config(TASK, ImageData)
        if not run.data.classes:
            raise ConfigError(
                f"{run_dir}: a ViT without a classifier (an imported ViTModel); "
                f"fine-tune one with: vaswani train image --init {run_dir} --data DIR"
            )
        processing = ImageProcessing.load(Path(run_dir))
        model = RunDir(run_dir).load_weights(model_of(run)).to(where)
        return cls(model.eval(), processing, run.data)

    def pixels(self, paths: Sequence[str | Path]) -> Tensor:
        """The model inputs (n, C, H, W) of the image files ``paths``, read and preprocessed as in
        training; a file that is not a readable image is a one-line error naming it."""
        # Each resized as it is read: only one image at its full size is held at a time.
        images = [self.processing.resize(read_image(path, self.processing.channels)) for path in paths]
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
    """The (untrained) model of an ``image`` run: a classifier of its classes, or the bare encoder of
    an imported ``ViTModel`` (no classes)."""
    if run.data.classes is None:
        raise ConfigError("config field 'data.classes': an image classifier run needs its classes")
    return ViT(run.model, len(run.data.classes))
