"""ViT checkpoints in Hugging Face's format, both ways, checked against ``transformers`` itself: the same
logits (fp32, within 1e-5) from random-weight models of several shapes (ViT-Ti's among them), the same at
other resolutions (``interpolate_pos_encoding``, within 1e-4), and one-line refusals of what ViT cannot
express (needs the ``compare`` extra; skipped without it)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import one_line, perturb
from tests.test_images import fixtures as image_fixtures
from vaswani.cli import main
from vaswani.data.images import ImageProcessing
from vaswani.errors import ConfigError, DataError
from vaswani.interop import export_hf, import_hf
from vaswani.interop.common import write_json, write_safetensors
from vaswani.interop.vit import (
    class_names,
    config_from_hf,
    config_to_hf,
    n_classes_of,
    state_from_hf,
    state_to_hf,
)
from vaswani.models.vit import ViT
from vaswani.pipelines.image import ImageClassifier
from vaswani.rundir import RunDir

transformers = pytest.importorskip("transformers")

# A small model, a greyscale one with timm's epsilon and the tanh GELU on a non-square grid of tiny
# patches, and ViT-Ti/16 at 224² (Touvron et al.'s DeiT-Ti layout).
HF_CONFIGS: list[dict[str, Any]] = [
    {
        "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
        "image_size": 32, "patch_size": 8, "num_labels": 3,
    },
    {
        "hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 3, "intermediate_size": 80,
        "image_size": 24, "patch_size": 4, "num_channels": 1, "layer_norm_eps": 1e-6,
        "hidden_act": "gelu_pytorch_tanh", "num_labels": 5,
    },
    {
        "hidden_size": 192, "num_hidden_layers": 12, "num_attention_heads": 3, "intermediate_size": 768,
        "image_size": 224, "patch_size": 16, "num_labels": 10,
    },
]  # fmt: skip
IDS = ["small", "grey-timm-eps", "vit-ti"]


def hf_vit(config: dict[str, Any], with_head: bool = True, seed: int = 0) -> Any:
    """A ``ViTForImageClassification`` (or ``ViTModel``) with every weight random, in eval mode, so that
    a weight copied to the wrong place shows: norm gains ~ N(1, 0.1²), biases ~ N(0, 0.1²), matrices and
    the patch projection ~ N(0, 1/fan_in) (activations keep their scale through ViT-Ti's 12 layers, and
    fp32 rounding with them), [CLS] and the positions ~ N(0, 0.3²)."""
    torch.manual_seed(seed)
    hf_config = transformers.ViTConfig(**config)
    model = (transformers.ViTForImageClassification if with_head else transformers.ViTModel)(hf_config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layernorm" in name:
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if name.endswith("weight") else 0.0))
            elif name.endswith("bias"):
                p.copy_(torch.randn_like(p) * 0.1)
            elif name.endswith("weight"):
                p.copy_(torch.randn_like(p) / math.sqrt(p[0].numel()))
            else:
                p.copy_(torch.randn_like(p) * 0.3)
    return model.eval()


def pixels(config: dict[str, Any], batch: int = 3, size: tuple[int, int] | None = None) -> torch.Tensor:
    """Random pixel values (batch, channels, H, W) at the model's resolution or ``size``."""
    height, width = size or (config["image_size"], config["image_size"])
    generator = torch.Generator().manual_seed(1)
    return torch.randn(batch, config.get("num_channels", 3), height, width, generator=generator)


def saved(model: Any, folder: Path) -> dict[str, torch.Tensor]:
    """The tensors ``save_pretrained`` writes for ``model`` (transformers' on-disk names)."""
    model.save_pretrained(folder)
    return load_file(str(folder / "model.safetensors"))


def imported(model: Any, folder: Path) -> ViT:
    """Our ViT with the weights of the Hugging Face ``model``, as import-hf reads them."""
    tensors = saved(model, folder)
    cfg = config_from_hf(model.config.to_dict())
    ours = ViT(cfg, n_classes_of(tensors)).eval()
    ours.load_state_dict(state_from_hf(tensors, cfg), strict=True)
    return ours


@pytest.mark.parametrize("config", HF_CONFIGS, ids=IDS)
def test_imported_model_gives_the_logits_of_transformers(tmp_path: Path, config: dict[str, Any]) -> None:
    hf = hf_vit(config)
    ours = imported(hf, tmp_path)
    assert ours.config.fused_qkv
    x = pixels(config)
    with torch.no_grad():
        theirs = hf(pixel_values=x).logits
        assert theirs.std() > 0.1
        torch.testing.assert_close(ours(x), theirs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("config", HF_CONFIGS[:2], ids=IDS[:2])
def test_other_resolutions_follow_interpolate_pos_encoding(tmp_path: Path, config: dict[str, Any]) -> None:
    hf = hf_vit(config)
    ours = imported(hf, tmp_path)
    patch = config["patch_size"]
    for size in (
        (config["image_size"] + 2 * patch, config["image_size"] + 2 * patch),
        (3 * patch, 5 * patch),
    ):
        x = pixels(config, size=size)
        with torch.no_grad():
            theirs = hf(pixel_values=x, interpolate_pos_encoding=True).logits
            torch.testing.assert_close(ours(x), theirs, atol=1e-4, rtol=0)


@pytest.mark.parametrize("config", HF_CONFIGS[:2], ids=IDS[:2])
def test_vit_model_without_head_gives_the_hidden_states(tmp_path: Path, config: dict[str, Any]) -> None:
    hf = hf_vit(config, with_head=False)
    ours = imported(hf, tmp_path)
    assert ours.head is None
    x = pixels(config)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), hf(pixel_values=x).last_hidden_state, atol=1e-5, rtol=0)


@pytest.mark.parametrize("config", HF_CONFIGS, ids=IDS)
@pytest.mark.parametrize("fused", [True, False])
def test_exported_model_gives_our_logits(tmp_path: Path, config: dict[str, Any], fused: bool) -> None:
    cfg = config_from_hf(transformers.ViTConfig(**config).to_dict()).replace(fused_qkv=fused)
    torch.manual_seed(2)
    ours = perturb(ViT(cfg, config["num_labels"]), 0.05).eval()
    classes = [f"class {i}" for i in range(config["num_labels"])]
    write_json(tmp_path / "config.json", config_to_hf(cfg, classes))
    write_safetensors(tmp_path / "model.safetensors", state_to_hf(ours.state_dict(), cfg))
    hf = transformers.ViTForImageClassification.from_pretrained(tmp_path).eval()
    assert hf.config.id2label[1] == "class 1"
    x = pixels(config)
    with torch.no_grad():
        torch.testing.assert_close(hf(pixel_values=x).logits, ours(x), atol=1e-5, rtol=0)


def test_export_then_import_is_the_identity(tmp_path: Path) -> None:
    hf = hf_vit(HF_CONFIGS[1], seed=3)
    tensors = saved(hf, tmp_path)
    cfg = config_from_hf(hf.config.to_dict())
    ours = ViT(cfg, 5)
    ours.load_state_dict(state_from_hf(tensors, cfg))
    back = state_to_hf(ours.state_dict(), cfg)
    assert sorted(back) == sorted(tensors)
    assert all(torch.equal(back[name], tensor) for name, tensor in tensors.items())
    assert config_from_hf(config_to_hf(cfg, class_names(hf.config.to_dict(), 5))) == cfg
    assert class_names(hf.config.to_dict(), 5) == [f"LABEL_{i}" for i in range(5)]
    assert class_names({"id2label": {"0": "cat", "1": "dog"}}, 2) == ["cat", "dog"]


def test_config_refusals_name_the_field() -> None:
    base = transformers.ViTConfig(**HF_CONFIGS[0]).to_dict()
    for change, field in (
        ({"qkv_bias": False}, "'qkv_bias'"),
        ({"hidden_act": "quick_gelu"}, "'hidden_act'"),
        ({"image_size": 30}, "'image_size'"),
        ({"image_size": [32, 48]}, "'image_size'"),
        ({"num_attention_heads": 5}, "'num_attention_heads'"),
        ({"model_type": "deit"}, "'model_type'"),
        ({"hidden_dropout_prob": 1.5}, "'hidden_dropout_prob'"),
    ):
        with pytest.raises(ConfigError) as caught:
            config_from_hf({**base, **change})
        assert field in one_line(caught)
    with pytest.raises(ConfigError, match="'id2label'"):
        class_names({"id2label": {"0": "same", "1": "same"}}, 2)
    cfg = config_from_hf(base)
    for change, field in (({"pooling": "mean"}, "pooling"), ({"norm_placement": "post"}, "norm_placement")):
        with pytest.raises(ConfigError, match=f"'model.{field}'"):
            config_to_hf(cfg.replace(**change), ["a", "b", "c"])
    assert config_to_hf(cfg.replace(pooling="mean"), [])["architectures"] == ["ViTModel"]
    assert config_to_hf(cfg.replace(drop_path=0.1), ["a"])["architectures"] == ["ViTForImageClassification"]


def test_weight_refusals_name_the_tensor(tmp_path: Path) -> None:
    hf = hf_vit(HF_CONFIGS[0])
    tensors = saved(hf, tmp_path)
    cfg = config_from_hf(hf.config.to_dict())
    missing = {k: v for k, v in tensors.items() if k != "vit.layernorm.weight"}
    extra = {**tensors, "vit.encoder.layer.5.output.dense.bias": torch.zeros(32)}
    wrong = {**tensors, "vit.embeddings.position_embeddings": torch.zeros(1, 5, 32)}
    for bad, words in (
        (missing, "'vit.layernorm.weight' is missing"),
        (extra, "unexpected tensor 'vit.encoder.layer.5.output.dense.bias'"),
        (wrong, "'vit.embeddings.position_embeddings' has shape [1, 5, 32]"),
    ):
        with pytest.raises(DataError) as caught:
            state_from_hf(bad, cfg)
        assert words in one_line(caught)


# ---------------------------------------------------------------------------------------------
# Folders: import-hf into an image run, classify-image, export-hf


CLASSES = ["cat", "dog", "bird", "fish"]
FOLDER_CONFIG = {**HF_CONFIGS[0], "num_labels": 4, "id2label": dict(enumerate(CLASSES))}


def hf_folder(folder: Path, processor: dict[str, Any] | None = None) -> Path:
    """A random ``ViTForImageClassification`` of :data:`CLASSES` saved with its ``ViTImageProcessor``."""
    hf_vit(FOLDER_CONFIG, seed=5).save_pretrained(folder)
    settings = {"size": {"height": 32, "width": 32}, "image_mean": [0.4, 0.5, 0.6], **(processor or {})}
    transformers.ViTImageProcessor(**settings).save_pretrained(folder)
    return folder


def test_classify_image_on_an_imported_folder_equals_the_hf_pipeline(tmp_path: Path, capsys) -> None:
    folder = hf_folder(tmp_path / "hf")
    run = import_hf(folder, tmp_path / "run")
    assert RunDir(run).read_config().task == "image"
    assert ImageProcessing.load(run) == ImageProcessing.load(folder)
    paths = image_fixtures(tmp_path / "images")
    pillow = getattr(transformers, "ViTImageProcessorPil", transformers.ViTImageProcessor)  # see test_images
    pipeline = transformers.pipeline(
        "image-classification", model=str(folder), image_processor=pillow.from_pretrained(folder)
    )
    theirs = pipeline([str(path) for path in paths], top_k=4)
    ours = ImageClassifier.load(run, "cpu").predict(paths, top_k=4)
    for mine, hf in zip(ours, theirs, strict=True):
        assert [name for name, _ in mine] == [row["label"] for row in hf]
        torch.testing.assert_close(
            torch.tensor([p for _, p in mine]), torch.tensor([row["score"] for row in hf]), atol=1e-5, rtol=0
        )
    capsys.readouterr()
    assert main(["classify-image", str(run), *map(str, paths[:2]), "--top-k", "2"]) == 0
    printed = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [row[1] for row in printed] == [hf[0]["label"] for hf in theirs[:2]]


def test_export_of_an_imported_run_gives_back_the_folder(tmp_path: Path) -> None:
    folder = hf_folder(tmp_path / "hf", {"resample": 3, "rescale_factor": 1 / 127.5})
    out = export_hf(import_hf(folder, tmp_path / "run"), tmp_path / "back")
    original, back = load_file(str(folder / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert sorted(original) == sorted(back)
    assert all(torch.equal(original[name], back[name]) for name in original)
    assert ImageProcessing.load(out) == ImageProcessing.load(folder)
    hf = transformers.ViTForImageClassification.from_pretrained(out).eval()
    assert [hf.config.id2label[i] for i in range(4)] == CLASSES
    processor = transformers.AutoImageProcessor.from_pretrained(out)
    assert processor.resample == 3 and processor.size == {"height": 32, "width": 32}


def test_export_of_a_trained_digits_run_gives_its_logits(tmp_path: Path) -> None:
    run = tmp_path / "digits"
    args = ["--d-model", "16", "--heads", "2", "--d-ff", "32", "--layers", "2", "--max-steps", "2"]
    assert main(["train", "image", "--out", str(run), *args, "--quiet", "--no-bf16"]) == 0
    out = export_hf(run, tmp_path / "hf")
    hf = transformers.ViTForImageClassification.from_pretrained(out).eval()
    assert hf.config.num_channels == 1 and [hf.config.id2label[i] for i in range(10)] == [
        str(d) for d in range(10)
    ]
    classifier = ImageClassifier.load(run, "cpu")
    x = torch.randn(5, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(hf(pixel_values=x).logits, classifier.model(x), atol=1e-5, rtol=0)
    assert ImageProcessing.load(out) == classifier.processing


def test_folder_refusals_are_one_line(tmp_path: Path) -> None:
    single = tmp_path / "single"
    hf_vit({**HF_CONFIGS[0], "num_labels": 1}).save_pretrained(single)
    with pytest.raises(DataError) as caught:
        import_hf(single, tmp_path / "out1")
    assert "a classifier of 1 class" in one_line(caught) and "model.safetensors" in one_line(caught)
    grey = hf_folder(tmp_path / "grey", {"image_mean": [0.5], "image_std": [0.5]})
    with pytest.raises(ConfigError) as caught:
        import_hf(grey, tmp_path / "out2")
    assert "preprocessor_config.json" in one_line(caught) and "'image_mean' has 1 channels" in one_line(
        caught
    )
    odd = hf_folder(tmp_path / "odd", {"size": {"height": 30, "width": 32}})
    with pytest.raises(
        ConfigError, match="'size' \\[30, 32\\] is not a multiple of the model's patch_size 8"
    ):
        import_hf(odd, tmp_path / "out3")
    assert not any(p.name.startswith("out") for p in tmp_path.iterdir())
    run = import_hf(hf_folder(tmp_path / "hf"), tmp_path / "run")
    config = json.loads((run / "config.json").read_text())
    config["model"]["pooling"] = "mean"
    (run / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"'model.pooling': ViT needs \"cls\""):
        export_hf(run, tmp_path / "out4")
    assert not (tmp_path / "out4").exists()
