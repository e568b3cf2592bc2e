"""A Hugging Face ``ViTModel`` (no classifier) imported as an image run without classes, exported back,
refused where a classifier is needed, and fine-tuned with ``vaswani train image --init``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from tests.test_interop_vit import HF_CONFIGS, hf_folder, hf_vit, pixels
from vaswani.cli import main
from vaswani.data.config import ImageData
from vaswani.data.images import ImageProcessing
from vaswani.interop import export_hf, import_hf
from vaswani.models.vit import ViT
from vaswani.pipelines.image import TASK, model_of
from vaswani.rundir import RunDir
from vaswani.tasks.image import with_pretrained

transformers = pytest.importorskip("transformers")


def headless_folder(folder: Path) -> Path:
    """A random ``ViTModel`` (HF_CONFIGS[0]: 32 dimensions, 32² images in 8² patches) with its processor."""
    hf_vit(HF_CONFIGS[0], with_head=False, seed=3).save_pretrained(folder)
    processor = transformers.ViTImageProcessor(size={"height": 32, "width": 32}, image_mean=[0.4, 0.5, 0.6])
    processor.save_pretrained(folder)
    return folder


def image_folder(root: Path, per_class: int = 6) -> Path:
    """Two classes of 40 × 40 RGB images: reddish and bluish noise."""
    generator = torch.Generator().manual_seed(0)
    for name, channel in (("red", 0), ("blue", 2)):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = torch.randint(0, 100, (40, 40, 3), generator=generator, dtype=torch.uint8)
            pixels[..., channel] += 150
            Image.fromarray(pixels.numpy()).save(root / name / f"{i}.png")
    return root


def test_vit_model_folder_imports_and_exports_with_its_hidden_states(tmp_path: Path) -> None:
    folder = headless_folder(tmp_path / "hf")
    run = import_hf(folder, tmp_path / "run")
    config = RunDir(run).read_config(TASK, ImageData)
    assert config.data.classes == () and config.data.source == "imported"
    ours = RunDir(run).load_weights(model_of(config)).eval()
    hf = transformers.ViTModel.from_pretrained(folder).eval()
    x = pixels(HF_CONFIGS[0])
    with torch.no_grad():
        theirs = hf(pixel_values=x).last_hidden_state
        torch.testing.assert_close(ours(x), theirs, atol=1e-5, rtol=0)
        out = export_hf(run, tmp_path / "back")
        back = transformers.ViTModel.from_pretrained(out).eval()
        torch.testing.assert_close(back(pixel_values=x).last_hidden_state, theirs, atol=1e-5, rtol=0)
    original = load_file(str(folder / "model.safetensors"))
    exported = load_file(str(out / "model.safetensors"))
    kept = {name for name in original if not name.startswith("pooler.")}
    assert kept == set(exported) and all(torch.equal(original[name], exported[name]) for name in kept)
    assert ImageProcessing.load(out) == ImageProcessing.load(folder)


def test_runs_without_a_classifier_or_images_are_refused_in_one_line(tmp_path: Path, capsys) -> None:
    run = import_hf(headless_folder(tmp_path / "hf"), tmp_path / "run")
    data = image_folder(tmp_path / "images")
    image = data / "red" / "0.png"
    for args in (["classify-image", str(run), str(image)], ["evaluate", str(run), "--data", str(data)]):
        capsys.readouterr()
        assert main(args) == 2
        error = capsys.readouterr().err.strip()
        assert "\n" not in error and "without a classifier" in error and f"--init {run}" in error
    classifier = import_hf(hf_folder(tmp_path / "hf4"), tmp_path / "classifier")
    assert main(["evaluate", str(classifier)]) == 2
    assert "--data DIR" in capsys.readouterr().err


def test_init_copies_the_encoder_and_adds_a_new_classifier(tmp_path: Path) -> None:
    run = import_hf(headless_folder(tmp_path / "hf"), tmp_path / "run")
    pretrained = RunDir(run).load_weights(model_of(RunDir(run).read_config(TASK, ImageData)))
    torch.manual_seed(7)
    built = with_pretrained(lambda: ViT(pretrained.config, 2), run)()
    state = built.state_dict()
    assert set(state) == {*pretrained.state_dict(), "head.weight", "head.bias"}
    assert all(torch.equal(state[name], tensor) for name, tensor in pretrained.state_dict().items())
    torch.manual_seed(7)
    assert torch.equal(state["head.weight"], ViT(pretrained.config, 2).state_dict()["head.weight"])


def test_train_image_init_fine_tunes_the_imported_encoder(tmp_path: Path, capsys) -> None:
    run = import_hf(headless_folder(tmp_path / "hf"), tmp_path / "run")
    data, tuned = image_folder(tmp_path / "images"), tmp_path / "tuned"
    base = ["train", "image", "--init", str(run), "--data", str(data), "--quiet", "--precision", "fp32"]
    assert main([*base, "--out", str(tmp_path / "bad"), "--d-model", "64"]) == 2
    assert "the model of an --init run is fixed" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
    assert main([*base, "--out", str(tuned), "--max-steps", "3", "--drop-path", "0.1"]) == 0
    before, after = RunDir(run).read_config(TASK, ImageData), RunDir(tuned).read_config(TASK, ImageData)
    assert after.model == before.model.replace(drop_path=0.1)
    assert after.data.classes == ("blue", "red") and after.train.lr == 1e-4
    assert ImageProcessing.load(tuned) == ImageProcessing.load(run)
    start = RunDir(run).load_weights(model_of(before)).state_dict()
    trained = RunDir(tuned).load_weights(model_of(after)).state_dict()
    # Three AdamW steps at lr 1e-4 move each weight by at most about 3e-4: the encoder was copied.
    assert max(float((trained[name] - start[name]).abs().max()) for name in start) < 1e-3
    capsys.readouterr()
    assert main(["classify-image", str(tuned), str(data / "red" / "0.png")]) == 0
    assert capsys.readouterr().out.split("\t")[1] in ("red", "blue")
