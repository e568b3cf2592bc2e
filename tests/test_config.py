"""Config validation: every bad field raises ConfigError naming the field."""

from __future__ import annotations

import dataclasses

import pytest

from vaswani.config import ARCHS, FAMILY_FIELDS, ModelConfig, TrainConfig
from vaswani.errors import ConfigError, VaswaniError


def test_defaults_are_the_base_model_and_valid():
    cfg = ModelConfig()
    assert (cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.n_encoder_layers) == (512, 8, 2048, 6)
    assert (cfg.norm, cfg.norm_placement) == ("layernorm", "post") and cfg.position == "sinusoidal"
    TrainConfig()


def test_heads_must_divide_d_model():
    with pytest.raises(ConfigError, match="n_heads"):
        ModelConfig(d_model=10, n_heads=3)
    ModelConfig(d_model=12, n_heads=3)  # and a divisor is fine


@pytest.mark.parametrize(
    "field,value",
    [
        ("norm", "layer_norm"),
        ("norm", "POST_LN"),
        ("position", "rotary"),
        ("activation", "swish"),
        ("tie_embeddings", "yes"),
        ("arch", "decoder_only_typo"),
        ("d_model", -8),
        ("d_model", 0),
        ("n_heads", -1),
        ("d_ff", 0),
        ("n_encoder_layers", -2),
        ("n_decoder_layers", 0),
        ("src_vocab_size", -5),
        ("max_len", 0),
        ("rel_clip", 0),
        ("norm_eps", -1e-5),
        ("attn_window", 0),
        ("attn_window", -3),
        ("dropout", 1.0),
        ("dropout", -0.1),
        ("attn_dropout", 1.5),
        ("pad_id", -1),
        ("pad_id", 32000),
        ("d_model", "512"),
        ("d_model", True),
        ("d_model", 512.0),
        ("n_heads", None),
        ("fused_qkv", 1),
        ("fused_qkv", "true"),
        ("dropout", "0.1"),
        ("norm", 3),
        ("attn_window", 2.5),
        ("attn_window", False),
    ],
)
def test_bad_model_field_is_refused_by_name(field, value):
    with pytest.raises(ConfigError, match=rf"\b{field}\b"):
        ModelConfig(**{field: value})
    with pytest.raises(ConfigError, match=rf"\b{field}\b"):
        ModelConfig.from_dict({field: value})


def test_config_error_is_a_user_error_and_a_value_error():
    with pytest.raises(VaswaniError):
        ModelConfig(norm="nope")
    with pytest.raises(ValueError):
        ModelConfig(norm="nope")


def test_unknown_field_in_from_dict_is_refused_by_name():
    with pytest.raises(ConfigError, match="d_modle") as info:
        ModelConfig.from_dict({"d_modle": 512}, source="run/config.json")
    assert "run/config.json" in str(info.value)
    with pytest.raises(ConfigError, match="lr_peak"):
        TrainConfig.from_dict({"lr_peak": 1e-3})
    with pytest.raises(ConfigError):
        ModelConfig.from_dict(["d_model", 512])  # not a mapping


def test_shared_vocabulary_needed_for_tie_all():
    with pytest.raises(ConfigError, match="tie_embeddings"):
        ModelConfig(src_vocab_size=100, tgt_vocab_size=200, tie_embeddings="all")
    ModelConfig(src_vocab_size=100, tgt_vocab_size=200, tie_embeddings="output")


def test_valid_values_are_accepted_and_normalised():
    cfg = ModelConfig(dropout=0, attn_window=4, norm="pre_rmsnorm", position="relative")
    assert isinstance(cfg.dropout, float) and cfg.dropout == 0.0
    assert ModelConfig(attn_window=None).attn_window is None
    assert ModelConfig(attn_window=1).attn_window == 1


def test_round_trip_and_replace_revalidates():
    cfg = ModelConfig(d_model=64, n_heads=4, norm="pre_ln", attn_window=3)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.replace(n_heads=8).n_heads == 8
    with pytest.raises(ConfigError, match="n_heads"):
        cfg.replace(n_heads=5)
    with pytest.raises(ConfigError, match="attn_window"):
        cfg.replace(attn_window=0)


def test_presets():
    assert ModelConfig.preset("transformer-big").d_model == 1024
    assert ModelConfig.preset("tiny", norm="pre_ln").norm_placement == "pre"
    with pytest.raises(ConfigError, match="no-such-model"):
        ModelConfig.preset("no-such-model")
    with pytest.raises(ConfigError, match="n_heads"):
        ModelConfig.preset("tiny", n_heads=3)


@pytest.mark.parametrize(
    "field,value",
    [
        ("label_smoothing", 1.0),
        ("label_smoothing", -0.1),
        ("lr", 0.0),
        ("warmup_steps", -1),
        ("schedule", "linear_typo"),
        ("optimizer", "sgd"),
        ("betas", (0.9, 1.0)),
        ("betas", (0.9,)),
        ("betas", "0.9,0.98"),
        ("max_steps", "100"),
        ("precision", "fp8"),
        ("device", "tpu"),
        ("accumulate", 0),
        ("min_lr", 1.0),
        ("clip_norm", -1.0),
    ],
)
def test_bad_train_field_is_refused_by_name(field, value):
    with pytest.raises(ConfigError, match=rf"\b{field}\b"):
        TrainConfig(**{field: value})


def test_train_betas_from_a_list_become_a_tuple():
    assert TrainConfig.from_dict({"betas": [0.9, 0.997]}).betas == (0.9, 0.997)


@pytest.mark.parametrize("arch", ARCHS)
def test_a_run_config_holds_its_own_family_s_fields_and_reads_back_equal(arch):
    cfg = ModelConfig(arch=arch)
    saved = cfg.to_dict()
    others = {name for name, archs in FAMILY_FIELDS.items() if arch not in archs}
    assert not others & set(saved), f"{arch} config.json holds {sorted(others & set(saved))}"
    assert {name for name, archs in FAMILY_FIELDS.items() if arch in archs} <= set(saved)
    assert ModelConfig.from_dict(saved) == cfg
    flat = dataclasses.asdict(cfg)  # an old config.json: every field of every family
    assert ModelConfig.from_dict(flat) == cfg


def test_another_family_s_field_off_its_default_is_kept():
    cfg = ModelConfig(arch="decoder_only", pooler=False)  # a GPT classifier's config sets it
    assert cfg.to_dict()["pooler"] is False and ModelConfig.from_dict(cfg.to_dict()) == cfg
