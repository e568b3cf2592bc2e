"""The images of an ``image`` run (its data config is :class:`~vaswani.data.config.ImageData`):
scikit-learn's 8 × 8 handwritten digits or an image folder read into uint8 tensors, the held-out
splits, and the batches (normalised when read, augmented for training).

The digits ship with scikit-learn (no download; 1,797 images of 10 classes, their 0-16 ink values
written as 8-bit grey, round(v · 255 / 16), converted to the model's channels). A folder has one
subfolder per class (``--data DIR``, the ImageFolder layout, read by :mod:`vaswani.data.images`). A
fixed ``valid_fraction`` is held out for validation, and of the digits also a fixed ``test_fraction``
for the test that follows training (both drawn with the data ``seed``). Training images may be
augmented: a random resized crop (``crop_scale``: the smallest area kept) and a left-right flip, drawn
from torch's random state, which checkpoints keep, so that a resumed run sees the same.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from PIL import Image
from torch import Tensor

from vaswani.data.config import ImageData
from vaswani.data.images import (
    ImageProcessing,
    convert_image,
    image_tensor,
    load_folder,
    random_flip,
    random_resized_crop,
    scan_folder,
)
from vaswani.errors import ConfigError
from vaswani.resources import host_memory_available


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


def check_pixels_fit(count: int, processing: ImageProcessing) -> None:
    """Refuse, before any is read, ``count`` images that ``processing`` resizes to (H, W) when
    their uint8 pixels (count · C · H · W bytes) pass the memory available: one line naming
    ``model.image_size`` (``--image-size``). Nothing is known before reading when it does not resize."""
    if not processing.do_resize:
        return
    height, width = processing.size
    need = count * processing.channels * height * width
    available = host_memory_available()
    if need > available:
        raise ConfigError(
            f"config field 'model.image_size': {count} images of {processing.channels}×{height}×{width} "
            f"pixels take {need / 2**30:.3g} GiB, {available / 2**30:.3g} GiB available"
        )


def digit_images(processing: ImageProcessing) -> Images:
    """scikit-learn's digits as 8-bit grey images in ``processing``'s channels (grey repeated), resized."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    check_pixels_fit(len(digits.images), processing)
    grey = (digits.images * 255 / 16).round().astype("uint8")
    pixels = [
        image_tensor(processing.resize(convert_image(Image.fromarray(image), processing.channels)))
        for image in grey
    ]
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
    check_pixels_fit(len(scan_folder(spec.data_dir, spec.classes).files), processing)
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
