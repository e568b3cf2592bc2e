"""Images in (``vaswani.data.images``): every Pillow mode converted as documented, EXIF orientation, one-line
refusals of unreadable files, ``pixel_values`` equal to Hugging Face's ``ViTImageProcessor`` (exactly: the
resize is Pillow's in both), ``preprocessor_config.json`` both ways, the ImageFolder scan, and the
augmentations' properties."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.helpers import one_line
from vaswani.data.images import (
    MAX_PIXELS,
    PREPROCESSOR,
    ImageProcessing,
    convert_image,
    image_size,
    image_tensor,
    load_folder,
    random_flip,
    random_resized_crop,
    read_image,
    scan_folder,
)
from vaswani.errors import ConfigError, DataError


def pattern(height: int, width: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    """Random uint8 pixels ``(H, W, C)`` (``(H, W)`` for one channel)."""
    array = np.random.default_rng(seed).integers(0, 256, (height, width, channels), dtype=np.uint8)
    return array[:, :, 0] if channels == 1 else array


def fixtures(folder: Path) -> list[Path]:
    """PNGs of mixed modes and sizes: RGB, L, RGBA, LA, P, P with a transparent colour, 1; two JPEGs, one
    with an EXIF orientation."""
    folder.mkdir(parents=True, exist_ok=True)
    rgb = Image.fromarray(pattern(37, 53))
    images = {
        "rgb.png": rgb,
        "grey.png": Image.fromarray(pattern(20, 16, 1, seed=1)),
        "rgba.png": Image.fromarray(pattern(30, 30, 4, seed=2), mode="RGBA"),
        "la.png": Image.fromarray(pattern(19, 41, 3, seed=3)[:, :, :2], mode="LA"),
        "palette.png": rgb.quantize(16),
        "bilevel.png": Image.fromarray(pattern(24, 24, 1, seed=4) > 127),
        "photo.jpg": Image.fromarray(pattern(64, 48, seed=5)),
    }
    exif = Image.Exif()
    exif[0x0112] = 8  # rotated 90° counter-clockwise: both sides turn it upright
    Image.fromarray(pattern(20, 36, seed=6)).save(folder / "turned.jpg", exif=exif)
    transparent = rgb.resize((31, 29)).quantize(8)
    transparent.info["transparency"] = 0
    images["transparent.png"] = transparent
    paths = [folder / "turned.jpg"]
    for name, image in images.items():
        image.save(folder / name)
        paths.append(folder / name)
    return paths


def test_modes_converted_as_documented(tmp_path: Path) -> None:
    rgba = pattern(6, 7, 4)
    Image.fromarray(rgba, mode="RGBA").save(tmp_path / "rgba.png")
    assert np.array_equal(np.array(read_image(tmp_path / "rgba.png")), rgba[:, :, :3])  # alpha dropped
    grey = pattern(5, 4, 1)
    Image.fromarray(grey).save(tmp_path / "grey.png")
    assert np.array_equal(np.array(read_image(tmp_path / "grey.png")), np.stack([grey] * 3, axis=-1))
    assert np.array_equal(np.array(read_image(tmp_path / "grey.png", channels=1)), grey)  # exact both ways
    wide = np.array([[0, 128, 257, 32896], [65535, 65278, 1000, 40000]], dtype=np.uint16)
    Image.fromarray(wide).save(tmp_path / "wide.png")
    assert Image.open(tmp_path / "wide.png").mode == "I;16"
    expected = np.round(wide.astype(np.float64) * 255 / 65535).astype(np.uint8)
    assert np.array_equal(np.array(read_image(tmp_path / "wide.png", channels=1)), expected)
    palette = Image.fromarray(pattern(8, 8)).quantize(4)
    palette.save(tmp_path / "p.png")
    assert np.array_equal(np.array(read_image(tmp_path / "p.png")), np.array(palette.convert("RGB")))
    cmyk = Image.fromarray(pattern(4, 4, 4), mode="CMYK")
    assert np.array_equal(np.array(convert_image(cmyk, 3)), np.array(cmyk.convert("RGB")))
    floats = Image.fromarray(np.array([[-3.0, 100.7], [254.6, 999.0]], dtype=np.float32))
    assert np.array(convert_image(floats, 1)).tolist() == [[0, 100], [254, 255]]
    for path in fixtures(tmp_path / "all"):
        for channels, mode in ((3, "RGB"), (1, "L")):
            image = read_image(path, channels)
            assert image.mode == mode
            assert image_tensor(image).shape == (channels, image.height, image.width)


def test_rgb_to_one_channel_is_pillows_luma() -> None:
    rgb = Image.fromarray(pattern(9, 11))
    assert np.array_equal(np.array(convert_image(rgb, 1)), np.array(rgb.convert("L")))
    with pytest.raises(ConfigError, match="channels must be 1 or 3"):
        convert_image(rgb, 2)


def test_exif_orientation_turns_the_image_upright(tmp_path: Path) -> None:
    array = pattern(10, 30)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated 90° clockwise: shown upright after a 270° turn
    Image.fromarray(array).save(tmp_path / "turned.png", exif=exif)
    image = read_image(tmp_path / "turned.png")
    assert image.size == (10, 30)
    assert np.array_equal(np.array(image), np.rot90(array, k=-1))


def test_unreadable_files_are_one_line_naming_them(tmp_path: Path) -> None:
    (tmp_path / "notes.png").write_text("not an image\n")
    Image.fromarray(pattern(40, 40)).save(tmp_path / "whole.png")
    data = (tmp_path / "whole.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(data[: len(data) // 2])
    (tmp_path / "empty.jpg").write_bytes(b"")
    for name in ("notes.png", "cut.png", "empty.jpg", "missing.png"):
        with pytest.raises(DataError) as caught:
            read_image(tmp_path / name)
        assert str(tmp_path / name) in one_line(caught)
    with pytest.raises(DataError, match="is a directory"):
        read_image(tmp_path)


def test_an_image_of_too_many_pixels_is_refused_from_its_header_in_one_line(
    tmp_path: Path, monkeypatch
) -> None:
    """A 17 KB 1-bit PNG of 12000 x 12000 pixels (144 M, under Pillow's hard limit) was decoded to
    4 GB with Pillow's raw DecompressionBombWarning (issue 34): refused before decoding, no warning."""
    Image.new("1", (12000, 12000)).save(tmp_path / "bomb.png")
    assert (tmp_path / "bomb.png").stat().st_size < 50_000
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Pillow's DecompressionBombWarning would fail the test
        with pytest.raises(DataError) as caught:
            read_image(tmp_path / "bomb.png")
        with pytest.raises(DataError, match=r"^bomb: image size 12000x12000"):
            image_size(tmp_path / "bomb.png", "bomb")  # the server's check, from the header alone
    assert str(tmp_path / "bomb.png") in one_line(caught) and "12000x12000" in one_line(caught)
    assert str(MAX_PIXELS) in one_line(caught)
    Image.fromarray(pattern(100, 100)).save(tmp_path / "big.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # Pillow refuses above twice its limit
    with pytest.raises(DataError) as caught:
        read_image(tmp_path / "big.png")
    assert str(tmp_path / "big.png") in one_line(caught) and "10000 pixels" in one_line(caught)


def test_processing_config_is_validated() -> None:
    for fields, name in (
        ({"image_std": (0.5, 0.5)}, "image_std"),
        ({"image_std": (0.5, 0.0, 0.5)}, "image_std"),
        ({"image_mean": (0.5, 0.5), "image_std": (0.5, 0.5)}, "image_mean"),
        ({"size": (0, 8)}, "size"),
        ({"resample": "cubic"}, "resample"),
        ({"rescale_factor": 0.0}, "rescale_factor"),
    ):
        with pytest.raises(ConfigError, match=f"'preprocessor.{name}'"):
            ImageProcessing(**fields)
    assert ImageProcessing(image_mean=(0.1,), image_std=(0.2,)).channels == 1


def test_pixel_values_follow_the_documented_steps() -> None:
    image = Image.fromarray(pattern(7, 5))
    plain = ImageProcessing(size=(7, 5), image_mean=(0.25, 0.5, 0.75), image_std=(0.5, 0.25, 2.0))
    pixels = torch.from_numpy(np.array(image)).permute(2, 0, 1).double() / 255
    mean, std = torch.tensor([0.25, 0.5, 0.75]), torch.tensor([0.5, 0.25, 2.0])
    expected = (pixels.float() - mean.view(3, 1, 1)) / std.view(3, 1, 1)
    assert torch.allclose(plain.pixel_values([image])[0], expected, atol=1e-6, rtol=0)
    raw = ImageProcessing(do_resize=False, do_rescale=False, do_normalize=False).pixel_values([image])
    assert raw.dtype == torch.float32 and torch.equal(raw[0], pixels.mul(255).round().float())
    resized = ImageProcessing(size=(4, 6)).pixel_values([image, Image.fromarray(pattern(30, 2))])
    assert resized.shape == (2, 3, 4, 6)
    with pytest.raises(DataError, match="different sizes"):
        ImageProcessing(do_resize=False).pixel_values([image, Image.fromarray(pattern(3, 3))])


def test_preprocessor_config_both_ways(tmp_path: Path) -> None:
    processing = ImageProcessing(size=(32, 48), resample="bicubic", image_mean=(0.1, 0.2, 0.3))
    assert ImageProcessing.from_hf(processing.to_hf()) == processing
    assert processing.save(tmp_path) == tmp_path / PREPROCESSOR
    assert ImageProcessing.load(tmp_path) == processing
    old = {
        "do_normalize": True,
        "do_resize": True,
        "image_mean": 0.5,
        "image_std": 0.5,
        "resample": 2,
        "size": 384,
    }
    assert ImageProcessing.from_hf(old) == ImageProcessing(size=(384, 384))
    assert ImageProcessing.from_hf({"feature_extractor_type": "ViTFeatureExtractor"}) == ImageProcessing()
    for config, words in (
        ({"size": {"shortest_edge": 224}}, "'size'"),
        ({"do_center_crop": True, "crop_size": 224}, "'do_center_crop'"),
        ({"resample": 9}, "'resample'"),
        ({"image_std": [0.5, 0.5]}, "image_std"),
        ([1, 2], "JSON object"),
    ):
        with pytest.raises(ConfigError) as caught:
            ImageProcessing.from_hf(config, "pp.json")  # type: ignore[arg-type]
        assert "pp.json" in one_line(caught) and words in one_line(caught)
    with pytest.raises(DataError, match="missing"):
        ImageProcessing.load(tmp_path / "nowhere")
    (tmp_path / PREPROCESSOR).write_text("{")
    with pytest.raises(DataError, match="unreadable"):
        ImageProcessing.load(tmp_path)


def write_folder(root: Path, counts: dict[str, int], size: tuple[int, int] = (12, 10)) -> Path:
    """An ImageFolder: ``counts[name]`` PNGs in each class folder ``name``, and a stray text file."""
    for number, (name, count) in enumerate(counts.items()):
        (root / name).mkdir(parents=True)
        for i in range(count):
            Image.fromarray(pattern(*size, seed=10 * number + i)).save(root / name / f"{i}.png")
        (root / name / "README.txt").write_text("not an image\n")
    return root


def test_scan_folder_reads_the_imagefolder_layout(tmp_path: Path) -> None:
    root = write_folder(tmp_path / "data", {"dog": 2, "cat": 3})
    (root / "cat" / "more").mkdir()
    Image.fromarray(pattern(5, 5)).save(root / "cat" / "more" / "x.JPG")
    (root / ".cache").mkdir()
    folder = scan_folder(root)
    assert folder.classes == ("cat", "dog")
    assert folder.labels == (0, 0, 0, 0, 1, 1)
    assert [p.relative_to(root).as_posix() for p in folder.files] == [
        "cat/0.png", "cat/1.png", "cat/2.png", "cat/more/x.JPG", "dog/0.png", "dog/1.png",
    ]  # fmt: skip
    assert scan_folder(root / "..", ("data", "other")).labels == (0,) * 6  # one known class is enough
    with pytest.raises(DataError, match="'data' is not one of the model's 1 classes"):
        scan_folder(root / "..", ("cats",))


def test_scan_folder_refusals_name_the_folder(tmp_path: Path) -> None:
    (tmp_path / "flat").mkdir()
    Image.fromarray(pattern(5, 5)).save(tmp_path / "flat" / "a.png")
    write_folder(tmp_path / "one", {"only": 2})
    write_folder(tmp_path / "hollow", {"full": 1, "empty": 0})
    for root, words in (
        (tmp_path / "nowhere", "no such image folder"),
        (tmp_path / "flat", "no class folders"),
        (tmp_path / "one", "only one class folder (only)"),
        (tmp_path / "hollow", "empty class folder"),
    ):
        with pytest.raises(DataError) as caught:
            scan_folder(root)
        assert str(root) in one_line(caught) and words in one_line(caught)


def test_load_folder_resizes_and_skips_bad_files_when_asked(tmp_path: Path) -> None:
    root = write_folder(tmp_path / "data", {"a": 2, "b": 2})
    Image.fromarray(pattern(31, 17, 4), mode="RGBA").save(root / "b" / "2.png")
    (root / "a" / "9.png").write_bytes(b"\x89PNG garbage")
    with pytest.raises(DataError) as caught:
        load_folder(root, ImageProcessing(size=(8, 8)))
    assert str(root / "a" / "9.png") in one_line(caught)
    loaded = load_folder(root, ImageProcessing(size=(8, 8)), skip_bad=True)
    assert loaded.skipped == (root / "a" / "9.png",)
    assert loaded.pixels.dtype == torch.uint8 and loaded.pixels.shape == (5, 3, 8, 8)
    assert loaded.labels.tolist() == [0, 0, 1, 1, 1] and loaded.classes == ("a", "b")
    first = ImageProcessing(size=(8, 8)).resize(read_image(root / "a" / "0.png"))
    assert torch.equal(loaded.pixels[0], image_tensor(first))
    grey = load_folder(root, ImageProcessing(size=(8, 8), image_mean=(0.5,), image_std=(0.5,)), True)
    assert grey.pixels.shape == (5, 1, 8, 8)
    with pytest.raises(DataError, match="does not resize"):
        load_folder(root, ImageProcessing(do_resize=False), skip_bad=True)
    for path in (root / "a").glob("*.png"):
        path.write_bytes(b"broken")
    with pytest.raises(DataError) as caught:
        load_folder(root, ImageProcessing(size=(8, 8)), skip_bad=True)
    assert f"{root / 'a'}: no readable image" in one_line(caught)


def test_random_resized_crop_properties() -> None:
    images = torch.randn(4, 3, 20, 30)
    crops = random_resized_crop(images, (16, 12), torch.Generator().manual_seed(1))
    assert crops.shape == (4, 3, 16, 12)
    again = random_resized_crop(images, (16, 12), torch.Generator().manual_seed(1))
    assert torch.equal(crops, again)
    assert not torch.equal(crops, random_resized_crop(images, (16, 12), torch.Generator().manual_seed(2)))
    whole = random_resized_crop(images, (20, 30), torch.Generator().manual_seed(3), (1.0, 1.0), (1.5, 1.5))
    assert torch.equal(whole, images)
    square = torch.randn(3, 2, 24, 24)
    windows = random_resized_crop(
        square, (12, 12), torch.Generator().manual_seed(4), (0.25, 0.25), (1.0, 1.0)
    )
    for image, window in zip(square, windows, strict=True):  # an exact 12 x 12 window of each image
        found = [
            (i, j)
            for i in range(13)
            for j in range(13)
            if torch.equal(image[:, i : i + 12, j : j + 12], window)
        ]
        assert len(found) == 1
    tall = torch.randn(1, 1, 40, 10)  # no crop of ratio >= 3/4 and area >= 90% fits: the central fallback
    fallback = random_resized_crop(tall, (13, 10), torch.Generator().manual_seed(5), (0.9, 1.0))
    assert torch.equal(fallback, tall[:, :, 13:26, :])


def test_random_flip_properties() -> None:
    images = torch.randn(64, 3, 5, 7)
    flipped = random_flip(images, torch.Generator().manual_seed(0))
    mirrored = [torch.equal(f, i.flip(-1)) for f, i in zip(flipped, images, strict=True)]
    kept = [torch.equal(f, i) for f, i in zip(flipped, images, strict=True)]
    assert all(m != k for m, k in zip(mirrored, kept, strict=True)) and 10 < sum(mirrored) < 54
    assert torch.equal(random_flip(flipped, torch.Generator().manual_seed(0)), images)  # twice = identity
    assert torch.equal(random_flip(images, torch.Generator(), p=0.0), images)
    assert torch.equal(random_flip(images, torch.Generator(), p=1.0), images.flip(-1))


def hf_processor(processing: ImageProcessing) -> object:
    """Hugging Face's ``ViTImageProcessor`` built from ``processing``'s ``preprocessor_config.json``: its
    Pillow backend (``ViTImageProcessorPil`` in transformers 5, whose default backend resizes with
    torchvision where that is installed; ``ViTImageProcessor`` itself before)."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    return getattr(transformers, "ViTImageProcessorPil", transformers.ViTImageProcessor).from_dict(
        processing.to_hf()
    )


@pytest.mark.parametrize(
    "processing",
    [
        ImageProcessing(),
        ImageProcessing(
            size=(32, 48), resample="bicubic", image_mean=(0.1, 0.2, 0.3), image_std=(0.3, 0.2, 0.9)
        ),
        ImageProcessing(size=(16, 16), resample="nearest", do_normalize=False),
        ImageProcessing(do_resize=False, do_rescale=False, image_mean=(100.0, 90.0, 80.0)),
    ],
)
def test_pixel_values_equal_vit_image_processor(tmp_path: Path, processing: ImageProcessing) -> None:
    """Exactly equal (no tolerance: the resize is Pillow's in both) on files of mixed modes and sizes, read
    as Hugging Face's image pipeline reads them (``load_image``: EXIF orientation, ``convert("RGB")``)."""
    processor = hf_processor(processing)
    from transformers.image_utils import load_image

    paths = fixtures(tmp_path / "fixtures")
    batches = [paths] if processing.do_resize else [[path] for path in paths]
    for batch in batches:
        ours = processing.pixel_values([read_image(path) for path in batch])
        theirs = processor(images=[load_image(str(path)) for path in batch], return_tensors="pt")[
            "pixel_values"
        ]
        assert ours.dtype == theirs.dtype == torch.float32
        assert torch.equal(ours, theirs), batch


def test_preprocessor_config_read_from_and_by_hugging_face(tmp_path: Path) -> None:
    processing = ImageProcessing(size=(40, 24), resample="lanczos", rescale_factor=1 / 127.5)
    processor = hf_processor(processing)
    processor.save_pretrained(tmp_path / "hf")
    assert ImageProcessing.load(tmp_path / "hf") == processing
    (tmp_path / "ours").mkdir()
    processing.save(tmp_path / "ours")
    from transformers import AutoImageProcessor

    loaded = AutoImageProcessor.from_pretrained(tmp_path / "ours")
    assert ImageProcessing.from_hf(loaded.to_dict()) == processing
