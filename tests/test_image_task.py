"""The image task (tasks/image.py): ``vaswani train image`` on the digits and on an image folder,
``classify-image``, ``evaluate`` with its confusion matrix, ``attention`` (rollout), and resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from matplotlib.image import imread
from PIL import Image
from safetensors.torch import load_file

from tests.helpers import assert_resumed_like_whole
from vaswani.cli import main
from vaswani.config import ModelConfig
from vaswani.data.config import ImageData
from vaswani.data.image_sets import digit_images, held_out, load_images
from vaswani.data.images import ImageProcessing, image_tensor, read_image
from vaswani.errors import ConfigError
from vaswani.inspect.attention import ATTENTION, attention_rollout, image_attention
from vaswani.models.vit import ViT
from vaswani.pipelines.image import ImageClassifier
from vaswani.plots import DPI
from vaswani.tasks import registry

pytestmark = pytest.mark.slow


def tiny_args(out: Path, *extra: str, steps: int = 6) -> list[str]:
    """``vaswani train image`` (the digits) with a two-layer ViT for a few steps (seconds)."""
    return [
        "train", "image", "--out", str(out), "--d-model", "16", "--heads", "2", "--d-ff", "32",
        "--layers", "2", "--max-steps", str(steps), "--eval-every", "3", "--warmup", "1", "--quiet",
        "--no-bf16", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("image") / "run"
    assert main(tiny_args(out)) == 0
    return out


def test_a_digits_run_holds_what_classify_needs(digits_run):
    config = json.loads((digits_run / "config.json").read_text())
    assert config["task"] == "image" and config["model"]["arch"] == "vit"
    assert config["data"]["classes"] == [str(d) for d in range(10)]
    assert config["model"]["image_size"] == 8 and config["model"]["channels"] == 1
    processing = ImageProcessing.load(digits_run)
    assert processing.size == (8, 8) and processing.image_mean == (0.5,)
    metrics = json.loads((digits_run / "metrics.json").read_text())
    assert metrics["steps"] == 6 and 0.0 <= metrics["test_accuracy"] <= 1.0


def test_the_splits_are_fixed_and_disjoint():
    processing = ImageProcessing(size=(8, 8), image_mean=(0.5,), image_std=(0.5,))
    a, b = load_images(ImageData(), processing), load_images(ImageData(), processing)
    assert a.test is not None and b.test is not None
    assert torch.equal(a.test.pixels, b.test.pixels) and torch.equal(a.valid.labels, b.valid.labels)
    parts = held_out(1797, (0.2, 0.1), 0)
    assert [len(p) for p in parts] == [359, 180, 1258]
    assert len(torch.cat(parts).unique()) == 1797


def test_images_that_would_not_fit_are_refused_before_one_is_read(folder, monkeypatch):
    """The digits (1,797) and a folder's 16 images at 8 × 8 in 3 channels: refused in one line
    naming ``model.image_size`` when their uint8 pixels pass the memory available by one byte,
    read when they fit exactly (a cap the check must compute, not a fixed size)."""
    processing = ImageProcessing(size=(8, 8))  # three channels
    for data, count in ((ImageData(), 1797), (ImageData(source="folder", data_dir=str(folder)), 16)):
        need = count * 3 * 8 * 8
        monkeypatch.setattr("vaswani.data.image_sets.host_memory_available", lambda n=need: n - 1)
        with pytest.raises(ConfigError, match=rf"model.image_size.*{count} images of 3×8×8 pixels"):
            load_images(data, processing)
        monkeypatch.setattr("vaswani.data.image_sets.host_memory_available", lambda n=need: n)
        splits = load_images(data, processing)
        assert sum(len(part.labels) for part in (splits.train, splits.valid, splits.test) if part) == count


def write_digits(folder: Path, indices: list[int]) -> list[Path]:
    """PNG files of the digits ``indices`` (8-bit grey, as the task reads them)."""
    images = digit_images(ImageProcessing(size=(8, 8), image_mean=(0.5,), image_std=(0.5,)))
    paths = []
    for i in indices:
        path = folder / f"digit{i}.png"
        Image.fromarray(images.pixels[i, 0].numpy()).save(path)
        paths.append(path)
    return paths


def test_classify_image_prints_the_model_s_top_classes(digits_run, tmp_path, capsys):
    paths = write_digits(tmp_path, [0, 1, 5])
    capsys.readouterr()
    assert main(["classify-image", str(digits_run), *map(str, paths), "--top-k", "3"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    classifier = ImageClassifier.load(digits_run, "cpu")
    images = digit_images(classifier.processing)
    with torch.no_grad():
        probs = classifier.model(classifier.processing.normalize(images.pixels[[0, 1, 5]])).softmax(dim=-1)
    for row, path, p in zip(rows, paths, probs, strict=True):
        top = p.topk(3)
        assert row[0] == str(path)
        assert row[1::2] == [classifier.classes[i] for i in top.indices.tolist()]
        assert [float(x) for x in row[2::2]] == pytest.approx(top.values.tolist(), abs=1e-4)


def test_evaluate_scores_the_test_split_and_draws_the_confusion_matrix(digits_run, tmp_path, capsys):
    out = tmp_path / "confusion.png"
    capsys.readouterr()
    assert main(["evaluate", str(digits_run), "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    metrics = json.loads((digits_run / "metrics.json").read_text())
    assert lines[0].startswith(
        f"accuracy {metrics['test_accuracy']:.1%}  macro-F1 {metrics['test_macro_f1']:.3f}"
    )
    assert "359 images" in lines[0] and lines[1] == f"confusion matrix: {out}"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_attention_draws_the_rollout_over_a_digit(digits_run, tmp_path, capsys):
    (path,) = write_digits(tmp_path, [3])
    out = tmp_path / "attn.png"
    assert main(["attention", str(digits_run), str(path), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    attention, title = image_attention(ImageClassifier.load(digits_run, "cpu"), str(path))
    assert attention.grid.shape == (4, 4) and "attention rollout" in title and "Abnar" in title
    assert attention.grid.sum() <= 1.0 + 1e-6 and attention.heads is None


def test_attention_of_the_last_layer_draws_each_head(digits_run, tmp_path):
    (path,) = write_digits(tmp_path, [5])
    classifier = ImageClassifier.load(digits_run, "cpu")
    attention, title = image_attention(classifier, str(path), "last")
    model, processing = classifier.model, classifier.processing
    image = image_tensor(processing.resize(read_image(path, processing.channels)))
    with torch.no_grad():
        _, weights = model.hidden(processing.normalize(image[None]), need_weights=True)
    cls_rows = weights[-1]["self"][0, :, 0, 1:]  # (heads, patches): [CLS] over the patches
    torch.testing.assert_close(attention.heads, cls_rows.reshape(-1, 4, 4))
    torch.testing.assert_close(attention.grid, cls_rows.mean(dim=0).reshape(4, 4))
    assert "last layer" in title
    out = tmp_path / "heads.png"
    assert main(["attention", str(digits_run), str(path), "--out", str(out), "--part", "last"]) == 0
    assert imread(out).shape[1] > 1.2 * 7.0 * DPI  # wider than the rollout's two panels: one per head
    assert main(["attention", str(digits_run), str(path), "--out", str(out), "--part", "cross"]) == 2


def test_rollout_equals_a_hand_computation_on_two_layers():
    """Two layers of two heads over three tokens, rolled out by hand: per layer the heads' mean
    plus the identity, halved, rows renormalised; then the second layer's times the first's."""
    first = torch.tensor([[[0.5, 0.3, 0.2], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]], [[0.1, 0.1, 0.8]] * 3])
    second = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.3, 0.3, 0.4]], [[0.2, 0.6, 0.2]] * 3])

    def mixed(layer: torch.Tensor) -> list[list[float]]:
        rows = []
        for i in range(3):
            row = [0.5 * (layer[0, i, j] + layer[1, i, j]) / 2 + (0.5 if i == j else 0.0) for j in range(3)]
            rows.append([float(v) / float(sum(row)) for v in row])
        return rows

    a1, a2 = mixed(first), mixed(second)
    hand = [[sum(a2[i][k] * a1[k][j] for k in range(3)) for j in range(3)] for i in range(3)]
    torch.testing.assert_close(attention_rollout([first, second]), torch.tensor(hand, dtype=torch.float64))


def test_rollout_of_a_model_reads_its_attention_weights():
    torch.manual_seed(0)
    cfg = ModelConfig(
        arch="vit", d_model=16, n_heads=2, d_ff=32, n_layers=2, image_size=8, patch_size=4, channels=1,
        norm_placement="pre", activation="gelu", dropout=0.0,
    )  # fmt: skip
    model = ViT(cfg, 2).eval()
    pixels = torch.randn(1, 1, 8, 8)
    _, weights = model.hidden(pixels, need_weights=True)
    rollout = attention_rollout([w["self"][0] for w in weights])
    torch.testing.assert_close(rollout.sum(dim=-1), torch.ones(5, dtype=torch.float64))
    assert rollout.shape == (5, 5)


def test_a_resumed_run_ends_with_the_same_weights(tmp_path):
    steps = ["--schedule", "constant", "--checkpoint-every", "3", "--drop-path", "0.2", "--deterministic"]
    steps += ["--random-crop", "0.5", "--flip"]  # augmentation drawn from the RNG that checkpoints keep
    assert main(tiny_args(tmp_path / "whole", *steps)) == 0
    parts = tmp_path / "parts"
    assert main(tiny_args(parts, *steps, steps=3)) == 0
    first_leg = load_file(parts / "model.safetensors")
    assert main(["train", "image", "--resume", str(parts), "--max-steps", "6", "--quiet"]) == 0
    assert_resumed_like_whole(tmp_path / "whole", parts, first_leg, 6)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """An ImageFolder of two classes of 16 × 16 images in several modes and sizes: bright and dark."""
    root = tmp_path_factory.mktemp("folder")
    generator = torch.Generator().manual_seed(0)
    for name, base in (("bright", 200), ("dark", 40)):
        (root / name).mkdir()
        for i in range(8):
            noise = torch.randint(0, 50, (20, 16, 3), generator=generator, dtype=torch.uint8)
            image = Image.fromarray((noise + base).clamp(0, 255).numpy().astype("uint8"))
            (image.convert("L") if i % 3 == 0 else image).save(root / name / f"{i}.png")
    return root


def test_a_folder_run_trains_classifies_and_evaluates(folder, tmp_path, capsys):
    out = tmp_path / "run"
    augment = ["--random-crop", "0.5", "--flip", "--label-smoothing", "0.1"]
    args = [
        "train",
        "image",
        "--data",
        str(folder),
        "--out",
        str(out),
        "--image-size",
        "16",
        "--patch-size",
        "8",
    ]
    small = ["--d-model", "16", "--heads", "2", "--d-ff", "32", "--layers", "1", "--batch-size", "4"]
    assert main([*args, *small, *augment, "--max-steps", "3", "--quiet", "--no-bf16"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["data"]["classes"] == ["bright", "dark"] and config["data"]["source"] == "folder"
    assert config["data"]["data_dir"] == str(folder.resolve())
    capsys.readouterr()
    assert main(["evaluate", str(out), "--data", str(folder)]) == 0
    assert "16 images" in capsys.readouterr().out and (out / "confusion_matrix.png").is_file()
    assert main(["classify-image", str(out), str(folder / "dark" / "0.png")]) == 0
    name, label, p = capsys.readouterr().out.split("\t")
    assert name.endswith("0.png") and label in ("bright", "dark") and 0.5 <= float(p) <= 1.0


def test_skip_bad_images_trains_on_the_rest_and_counts_them(folder, tmp_path, capsys):
    root = Path(shutil.copytree(folder, tmp_path / "images"))
    (root / "dark" / "broken.png").write_bytes(b"not a png")
    args = ["train", "image", "--data", str(root), "--image-size", "16", "--patch-size", "8", "--layers", "1"]
    small = ["--d-model", "16", "--heads", "2", "--d-ff", "32", "--max-steps", "1", "--quiet", "--no-bf16"]
    assert main([*args, *small, "--out", str(tmp_path / "refused")]) == 2
    assert "broken.png" in capsys.readouterr().err and not (tmp_path / "refused").exists()
    assert main([*args, *small, "--out", str(tmp_path / "run"), "--skip-bad-images"]) == 0
    err = capsys.readouterr().err
    assert f"skipped 1 unreadable image file(s), e.g. {root / 'dark' / 'broken.png'}" in err


def test_the_registry_knows_the_image_task():
    spec = registry.get("image")
    assert spec.data is ImageData and ATTENTION["image"] is image_attention and spec in registry.trainable()
