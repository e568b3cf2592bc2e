"""Images in: files read with Pillow, Hugging Face ``ViTImageProcessor``'s preprocessing, and folders of
one subfolder per class (the ImageFolder layout).

How each image mode is converted (:func:`read_image`), first turned upright by its EXIF orientation
(``ImageOps.exif_transpose``, as Hugging Face's ``load_image`` does):

- RGB, and every other colour mode Pillow knows (CMYK, YCbCr, LAB, HSV): Pillow's ``convert("RGB")``;
- greyscale L, bilevel 1: grey copied to the three channels;
- RGBA, LA, and a palette image (P) with or without transparency: the alpha channel is dropped, the
  colours kept (``convert("RGB")``, what Hugging Face's image pipeline does; no compositing on white);
- 16-bit greyscale (``I;16``, ``I;16B``, ``I;16L``, as 16-bit PNGs open): scaled to 8 bits,
  ``round(v · 255 / 65535)`` (Pillow's own ``convert`` would clip every value above 255 to white,
  and so does Hugging Face's pipeline on such files);
- 32-bit integer (I) and float (F) greyscale: Pillow's ``convert``, the values read as 0-255, clipped
  to that range (and a float's fraction cut off);
- one channel wanted (``channels=1``): the RGB image above turned to L by Pillow's luma
  (ITU-R 601-2: L = 0.299 R + 0.587 G + 0.114 B), exact on a greyscale image.

A file Pillow cannot open or decode (not an image, truncated) is a one-line
:class:`~vaswani.errors.DataError` naming it, and so is one of more than :data:`MAX_PIXELS` pixels
(width × height, read from its header before anything is decoded: :func:`image_size`), Pillow's
raw ``DecompressionBombWarning`` silenced. Such an image is refused, not decoded at a reduced size
(``Image.draft`` for JPEG): a reduced decode gives other pixels than the full one that training and
Hugging Face's preprocessing resize from.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from PIL import Image, ImageOps
from torch import Tensor

from vaswani.errors import ConfigError, DataError
from vaswani.io import atomic_write_text, json_text, not_regular, read_json
from vaswani.schema import Config, no_flag

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pbm")
PREPROCESSOR = "preprocessor_config.json"
# Pillow's filters by name, with the numbers Hugging Face's preprocessor_config.json writes.
RESAMPLES = {"nearest": 0, "lanczos": 1, "bilinear": 2, "bicubic": 3, "box": 4, "hamming": 5}
# The most pixels an image file may have: Pillow's decompression-bomb threshold (a 9459 x 9459
# image; 256 MiB of RGB pixels), past which Pillow only warns up to twice as many.
MAX_PIXELS = 89_478_485


def convert_image(image: Image.Image, channels: int) -> Image.Image:
    """``image`` in mode RGB (``channels=3``) or L (``channels=1``), converted as the module says."""
    if channels not in (1, 3):
        raise ConfigError(f"image channels must be 1 or 3, got {channels}")
    if image.mode.startswith("I;16"):
        wide = np.asarray(image).astype(np.uint32)
        image = Image.fromarray(((wide * 255 + 32767) // 65535).astype(np.uint8), mode="L")
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    return rgb if channels == 3 else rgb.convert("L")


@contextmanager
def opened_image(source: str | Path | IO[bytes], name: str | Path) -> Iterator[Image.Image]:
    """The image of ``source`` (a path or a binary file) opened lazily, nothing decoded yet: its
    header read, and refused in one line naming ``name`` when it has more than :data:`MAX_PIXELS`
    pixels or is no image Pillow knows (Pillow's ``DecompressionBombWarning`` silenced)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(source) as opened:
                width, height = opened.size
                if width * height > MAX_PIXELS:
                    raise DataError(
                        f"{name}: image size {width}x{height} ({width * height} pixels), more than "
                        f"the {MAX_PIXELS} an image may have"
                    )
                yield opened
    except FileNotFoundError:
        raise DataError(f"{name}: no such image file") from None
    except IsADirectoryError:
        raise DataError(f"{name}: is a directory, not an image file") from None
    except DataError:
        raise
    except Image.DecompressionBombError as exc:  # past twice Pillow's limit: refused at open
        size = str(exc).partition(" exceeds")[0]  # "Image size (400000000 pixels)"
        raise DataError(f"{name}: {size.lower()}, more than the {MAX_PIXELS} an image may have") from None
    except (OSError, ValueError, SyntaxError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if not isinstance(source, (str, Path)):  # Pillow names a file object by its repr: not to show
            reason = reason.replace(f" {source!r}", "")
        raise DataError(f"{name}: not a readable image ({reason})") from None


def image_size(source: str | Path | IO[bytes], name: str | Path) -> tuple[int, int]:
    """(width, height) of the image of ``source`` from its header alone (see :func:`opened_image`)."""
    with opened_image(source, name) as opened:
        return opened.size


def read_image(path: str | Path, channels: int = 3) -> Image.Image:
    """The image in file ``path``, upright (EXIF orientation) and in mode RGB or L (``channels`` 3 or
    1); one of more than :data:`MAX_PIXELS` pixels is refused before it is decoded."""
    kind = not_regular(path)
    if kind is not None:  # a FIFO would block Pillow's open, a device feed it forever
        raise DataError(f"{path}: is {kind}, not an image file")
    with opened_image(path, path) as opened:
        upright = ImageOps.exif_transpose(opened)
        upright.load()
    return convert_image(upright, channels)


def image_tensor(image: Image.Image) -> Tensor:
    """A Pillow image of mode RGB or L as a uint8 tensor ``(C, H, W)``."""
    array = np.array(image)
    pixels = torch.from_numpy(array[:, :, None] if array.ndim == 2 else array)
    return pixels.permute(2, 0, 1).contiguous()


@dataclass(frozen=True)
class ImageProcessing(Config):
    """What turns an image into a model's input, as Hugging Face's ``ViTImageProcessor`` does it: a resize
    to ``size`` (height, width) with Pillow's ``resample`` filter, a rescale by ``rescale_factor`` (in
    float64, then float32), and ``(x - image_mean) / image_std`` per channel (in float32); each step can be
    turned off: equal to its Pillow backend's output bit for bit (``ViTImageProcessorPil``; transformers 5
    resizes with torchvision instead where that is installed, which differs at the resize). The defaults
    are ViTImageProcessor's. ``len(image_mean)`` is the number of channels (1 or
    3). Saved in a run directory as Hugging Face's ``preprocessor_config.json`` (:meth:`save`,
    :meth:`load`)."""

    size: tuple[int, int] = no_flag((224, 224), range="(0, inf)")
    resample: str = "bilinear"
    do_resize: bool = True
    do_rescale: bool = True
    rescale_factor: float = no_flag(1 / 255, range="(0, inf)")
    do_normalize: bool = True
    image_mean: tuple[float, ...] = no_flag((0.5, 0.5, 0.5), range="(-inf, inf)")
    image_std: tuple[float, ...] = no_flag((0.5, 0.5, 0.5), range="(0, inf)")

    _section = "preprocessor"

    def _check(self) -> None:
        self._one_of("resample", tuple(RESAMPLES))
        if len(self.image_mean) not in (1, 3):
            self._fail("image_mean", f"one value per channel (1 or 3), got {len(self.image_mean)}")
        if len(self.image_std) != len(self.image_mean):
            self._fail(
                "image_std", f"{len(self.image_mean)} values like image_mean, got {len(self.image_std)}"
            )

    @property
    def channels(self) -> int:
        """The channels of the images it makes: 1 (L) or 3 (RGB)."""
        return len(self.image_mean)

    def resize(self, image: Image.Image) -> Image.Image:
        """``image`` in this preprocessing's mode (:func:`convert_image`), resized if ``do_resize``."""
        image = convert_image(image, self.channels)
        if not self.do_resize or image.size == (self.size[1], self.size[0]):
            return image
        return image.resize((self.size[1], self.size[0]), resample=Image.Resampling(RESAMPLES[self.resample]))

    def normalize(self, pixels: Tensor) -> Tensor:
        """Pixel values ``(..., C, H, W)`` (uint8) rescaled and normalised: float32, the same shape."""
        values = pixels.to(torch.float64) * self.rescale_factor if self.do_rescale else pixels
        values = values.to(torch.float32)
        if not self.do_normalize:
            return values
        shape = (self.channels, 1, 1)
        mean = torch.tensor(self.image_mean, dtype=torch.float32, device=values.device).view(shape)
        std = torch.tensor(self.image_std, dtype=torch.float32, device=values.device).view(shape)
        return (values - mean) / std

    def pixel_values(self, images: Sequence[Image.Image]) -> Tensor:
        """Hugging Face's ``pixel_values`` of ``images``: float32 ``(N, C, H, W)``. Without ``do_resize``,
        the images must all have one size."""
        resized = [image_tensor(self.resize(image)) for image in images]
        if len({tuple(pixels.shape) for pixels in resized}) > 1:
            raise DataError("images of different sizes need do_resize to be batched")
        return self.normalize(torch.stack(resized))

    def to_hf(self) -> dict[str, Any]:
        """Hugging Face's ``preprocessor_config.json`` for a ``ViTImageProcessor``."""
        return {
            "do_normalize": self.do_normalize,
            "do_rescale": self.do_rescale,
            "do_resize": self.do_resize,
            "image_mean": list(self.image_mean),
            "image_processor_type": "ViTImageProcessor",
            "image_std": list(self.image_std),
            "resample": RESAMPLES[self.resample],
            "rescale_factor": self.rescale_factor,
            "size": {"height": self.size[0], "width": self.size[1]},
        }

    @classmethod
    def from_hf(cls, config: dict[str, Any], source: str = PREPROCESSOR) -> ImageProcessing:
        """From Hugging Face's ``preprocessor_config.json`` (absent keys take ViTImageProcessor's defaults);
        settings this preprocessing cannot follow (a shortest-edge resize, a centre crop, padding) are
        refused by name. ``source`` names the file in errors."""
        if not isinstance(config, dict):
            raise ConfigError(f"{source}: must be a JSON object")
        for name in ("do_center_crop", "do_pad"):
            if config.get(name):
                raise ConfigError(f"{source}: '{name}' is not supported (only a resize to height x width)")
        fields: dict[str, Any] = {}
        for name in ("do_resize", "do_rescale", "rescale_factor", "do_normalize"):
            if name in config:
                fields[name] = config[name]
        if "size" in config:
            fields["size"] = _hf_size(config["size"], source)
        if "resample" in config:
            names = {number: name for name, number in RESAMPLES.items()}
            if config["resample"] not in names:
                raise ConfigError(
                    f"{source}: 'resample' must be one of {sorted(names)}, got {config['resample']!r}"
                )
            fields["resample"] = names[config["resample"]]
        for name in ("image_mean", "image_std"):
            value = config.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                fields[name] = (float(value),) * 3
            elif value is not None:
                fields[name] = value
        try:
            return cls.from_dict(fields, source)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    def save(self, folder: Path) -> Path:
        """Write :meth:`to_hf` as ``folder/preprocessor_config.json``; the path written."""
        path = folder / PREPROCESSOR
        atomic_write_text(path, json_text(self.to_hf()))
        return path

    @classmethod
    def load(cls, folder: Path) -> ImageProcessing:
        """Read ``folder/preprocessor_config.json`` (written by :meth:`save` or by Hugging Face)."""
        path = folder / PREPROCESSOR
        if not path.is_file():
            raise DataError(f"{path}: missing")
        config = read_json(path, invalid="unreadable")
        return cls.from_hf(config, str(path))


def _hf_size(size: Any, source: str) -> tuple[int, int]:
    """Hugging Face's ``size`` (an int for a square, or ``{"height", "width"}``) as (height, width)."""
    if isinstance(size, int) and not isinstance(size, bool):
        return (size, size)
    if isinstance(size, dict) and set(size) == {"height", "width"}:
        return (size["height"], size["width"])
    raise ConfigError(f"{source}: 'size' must be an int or {{'height', 'width'}}, got {size!r}")


@dataclass(frozen=True)
class ImageFolder:
    """The image files of a folder with one subfolder per class: ``classes`` sorted by name, and for
    each file (``files``, sorted within each class) its class number (``labels``)."""

    root: Path
    classes: tuple[str, ...]
    files: tuple[Path, ...]
    labels: tuple[int, ...]


def scan_folder(root: str | Path, classes: Sequence[str] | None = None) -> ImageFolder:
    """The ImageFolder layout of ``root``: every subfolder a class (hidden ones skipped), its files with an
    image suffix (:data:`IMAGE_SUFFIXES`, any case) its images, found recursively. Refused with one line
    naming the folder: no such folder, fewer than two classes, a class folder without images. With
    ``classes`` (a trained model's), each subfolder must be one of them and labels number them; one
    class is then enough."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: no such image folder")
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    known = tuple(classes) if classes is not None else tuple(p.name for p in folders)
    if not folders:
        raise DataError(f"{root}: no class folders (one subfolder of images per class)")
    if classes is None and len(folders) < 2:
        raise DataError(f"{root}: only one class folder ({folders[0].name}); a classifier needs at least two")
    files: list[Path] = []
    labels: list[int] = []
    for folder in folders:
        if folder.name not in known:
            raise DataError(f"{folder}: class '{folder.name}' is not one of the model's {len(known)} classes")
        images = sorted(
            p
            for p in folder.rglob("*")
            if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file() and not p.name.startswith(".")
        )
        if not images:
            raise DataError(f"{folder}: empty class folder (no {', '.join(IMAGE_SUFFIXES)} files)")
        files += images
        labels += [known.index(folder.name)] * len(images)
    return ImageFolder(root, known, tuple(files), tuple(labels))


@dataclass(frozen=True)
class ImageSet:
    """Images read and resized: ``pixels`` uint8 ``(N, C, H, W)`` (to be :meth:`ImageProcessing.normalize`\\ d
    batch by batch), ``labels`` int64 ``(N,)``, the class names, and the files skipped as unreadable."""

    pixels: Tensor
    labels: Tensor
    classes: tuple[str, ...]
    skipped: tuple[Path, ...]


def load_folder(
    root: str | Path,
    processing: ImageProcessing,
    skip_bad: bool = False,
    classes: Sequence[str] | None = None,
) -> ImageSet:
    """Every image of the folder ``root`` (:func:`scan_folder`, with ``classes``), read (:func:`read_image`)
    and resized by ``processing``. An unreadable file is a one-line error naming it, or with ``skip_bad``
    is skipped and counted; a class left with no readable image is refused naming its folder."""
    folder = scan_folder(root, classes)
    pixels: list[Tensor] = []
    labels: list[int] = []
    skipped: list[Path] = []
    for path, label in zip(folder.files, folder.labels, strict=True):
        try:
            image = read_image(path, processing.channels)
        except DataError:
            if not skip_bad:
                raise
            skipped.append(path)
            continue
        pixels.append(image_tensor(processing.resize(image)))
        if pixels[-1].shape != pixels[0].shape:
            raise DataError(
                f"{path}: {tuple(pixels[-1].shape[1:])} pixels, not {tuple(pixels[0].shape[1:])} "
                "like the others, and the preprocessing does not resize"
            )
        labels.append(label)
    missing = sorted(set(folder.labels) - set(labels))
    if missing:
        raise DataError(f"{folder.root / folder.classes[missing[0]]}: no readable image in this class folder")
    return ImageSet(
        torch.stack(pixels), torch.tensor(labels, dtype=torch.int64), folder.classes, tuple(skipped)
    )


def random_resized_crop(
    images: Tensor,
    size: tuple[int, int],
    generator: torch.Generator,
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
) -> Tensor:
    """Each image of ``images`` ``(N, C, H, W)`` (float) cropped at random and resized to ``size`` (height,
    width), as torchvision's ``RandomResizedCrop``: a crop of ``scale`` times the area (uniform) and aspect
    ratio ``ratio`` (log-uniform), 10 tries, else the whole image cut to the nearest ratio in range; resized
    bilinearly with antialiasing (none when the crop already has ``size``). The draws come from ``generator``
    (on the CPU), so one seed gives one augmentation on every device."""
    crops = []
    height, width = images.shape[-2:]
    for image in images:
        top, left, h, w = _crop_box(height, width, scale, ratio, generator)
        crop = image[:, top : top + h, left : left + w]
        if (h, w) != tuple(size):
            crop = torch.nn.functional.interpolate(
                crop[None], size=size, mode="bilinear", align_corners=False, antialias=True
            )[0]
        crops.append(crop)
    return torch.stack(crops)


def _crop_box(
    height: int,
    width: int,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    generator: torch.Generator,
) -> tuple[int, int, int, int]:
    """(top, left, height, width) of one random crop, torchvision's ``RandomResizedCrop.get_params``."""
    area = height * width
    log_ratio = torch.log(torch.tensor(ratio))
    for _ in range(10):
        target = area * torch.empty(1).uniform_(scale[0], scale[1], generator=generator).item()
        aspect = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1], generator=generator)).item()
        w = round((target * aspect) ** 0.5)
        h = round((target / aspect) ** 0.5)
        if 0 < w <= width and 0 < h <= height:
            top = int(torch.randint(0, height - h + 1, (1,), generator=generator))
            left = int(torch.randint(0, width - w + 1, (1,), generator=generator))
            return top, left, h, w
    aspect = width / height
    if aspect < min(ratio):
        w, h = width, round(width / min(ratio))
    elif aspect > max(ratio):
        h, w = height, round(height * max(ratio))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def random_flip(images: Tensor, generator: torch.Generator, p: float = 0.5) -> Tensor:
    """``images`` ``(N, C, H, W)`` with each one mirrored left-right with probability ``p`` (draws from
    ``generator``, on the CPU)."""
    flip = (torch.rand(images.shape[0], generator=generator) < p).to(images.device)
    return torch.where(flip.view(-1, 1, 1, 1), images.flip(-1), images)
