"""The config tables of :mod:`vaswani.interop.fields`: each family's table read and written (a round
trip Hugging Face → ours → Hugging Face gives back every field read), and the two functions that run
them, on a small table of their own."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from tests.helpers import one_line
from vaswani.config import ModelConfig
from vaswani.errors import ConfigError
from vaswani.interop import bert, fields, gpt2, llama, marian, vit

# Per family: a config.json whose every field the table reads has a value other than the default.
ROUND_TRIPS: list[tuple[ModuleType, dict[str, Any]]] = [
    (gpt2, {
        "vocab_size": 57, "n_positions": 96, "n_embd": 48, "n_layer": 2, "n_head": 3, "n_inner": 80,
        "activation_function": "relu", "resid_pdrop": 0.2, "attn_pdrop": 0.3, "layer_norm_epsilon": 1e-6,
        "tie_word_embeddings": False, "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False, "add_cross_attention": False,
    }),
    (llama, {
        "vocab_size": 70, "hidden_size": 32, "intermediate_size": 56, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "hidden_act": "gelu",
        "max_position_embeddings": 72, "rms_norm_eps": 1e-5, "rope_theta": 1000.0, "attention_bias": True,
        "mlp_bias": True, "attention_dropout": 0.1, "tie_word_embeddings": True,
    }),
    (bert, {
        "vocab_size": 70, "hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 3,
        "intermediate_size": 80, "hidden_act": "relu", "hidden_dropout_prob": 0.2,
        "attention_probs_dropout_prob": 0.0, "max_position_embeddings": 48, "type_vocab_size": 3,
        "layer_norm_eps": 1e-6, "pad_token_id": 3, "tie_word_embeddings": False,
        "position_embedding_type": "absolute", "is_decoder": False, "add_cross_attention": False,
    }),
    (vit, {
        "hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 3, "intermediate_size": 80,
        "hidden_act": "gelu_new", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.2,
        "layer_norm_eps": 1e-6, "image_size": 24, "patch_size": 4, "num_channels": 1, "qkv_bias": True,
    }),
    (marian, {
        "vocab_size": 70, "decoder_vocab_size": 60, "max_position_embeddings": 40, "d_model": 32,
        "encoder_layers": 2, "decoder_layers": 1, "encoder_attention_heads": 2, "decoder_attention_heads": 2,
        "encoder_ffn_dim": 16, "decoder_ffn_dim": 16, "activation_function": "swish", "dropout": 0.2,
        "attention_dropout": 0.1, "activation_dropout": 0.0, "encoder_layerdrop": 0.0,
        "decoder_layerdrop": 0.0, "scale_embedding": True, "share_encoder_decoder_embeddings": False,
        "tie_word_embeddings": False, "pad_token_id": 59,
    }),
]  # fmt: skip


@pytest.mark.parametrize(("family", "hf"), ROUND_TRIPS, ids=lambda x: getattr(x, "MODEL_TYPE", ""))
def test_each_family_table_gives_back_every_field_it_reads(family: ModuleType, hf: dict[str, Any]) -> None:
    table = family.CONFIG_TABLE
    imported = {row.hf for row in table if row.imported}
    assert imported == set(hf), "the round trip config sets every field the table reads"
    ours, read = fields.from_hf({"model_type": family.MODEL_TYPE, **hf}, family.MODEL_TYPE, table)
    assert read == hf
    defaults = {row.hf: row.default for row in table}
    changed = {name for name, value in hf.items() if value != defaults[name]}
    assert changed, "some fields differ from their defaults"
    cfg = family.config_from_hf({"model_type": family.MODEL_TYPE, **hf})
    assert all(getattr(cfg, name) == value for name, value in ours.items())
    back = fields.to_hf(cfg, family.MODEL_TYPE, "Some", table)
    assert list(back) == ["model_type", "architectures", *(row.hf for row in table)]
    assert {name: back[name] for name in imported} == hf
    del back["architectures"]  # the table's caller names its own
    assert family.config_from_hf(back) == cfg


def test_defaults_optional_rows_and_conversions_are_read_by_the_table() -> None:
    table = (
        fields.size("hidden", "d_model", 64),
        fields.Field("inner", "d_ff", int, None, fields.SIZE, optional=True),
        fields.Field("act", "activation", str, "swish", (), {"swish": "silu", "gelu": "gelu"}),
        fields.Field("eps", "norm_eps", float, 1e-5, (fields.positive,), to_ours=float),
        fields.required("flag", False, " (only false)"),
        fields.constant("written_only", 0.02),
        fields.tied_head(True),
    )
    ours, read = fields.from_hf({"inner": None, "eps": 1, "written_only": "ignored"}, "x", table)
    assert ours == {
        "d_model": 64,
        "d_ff": None,
        "activation": "silu",
        "norm_eps": 1.0,
        "tie_embeddings": "output",
    }
    assert isinstance(ours["norm_eps"], float)
    assert read == {
        "hidden": 64,
        "inner": None,
        "act": "swish",
        "eps": 1,
        "flag": False,
        "tie_word_embeddings": True,
    }
    for bad, message in (
        ({"model_type": "y"}, "field 'model_type': expected 'x', got 'y'"),
        ({"hidden": "64"}, "field 'hidden': expected int, got '64'"),
        ({"hidden": True}, "field 'hidden': expected int, got True"),
        ({"inner": 0}, "field 'inner': must be >= 1, got 0"),
        ({"act": "tanh"}, "field 'act': 'tanh' is not supported; supported: swish, gelu"),
        ({"eps": 0.0}, "field 'eps': must be > 0, got 0.0"),
        ({"flag": True}, "field 'flag': true is not supported (only false)"),
        ({"hidden": 0, "flag": True}, "field 'hidden': must be >= 1, got 0"),  # the first row refused
    ):
        with pytest.raises(ConfigError) as exc:
            fields.from_hf(bad, "x", table)
        assert one_line(exc) == message


def test_the_table_writes_ours_converted_derived_and_constant_values_in_its_order() -> None:
    table = (
        fields.size("hidden", "d_model", 64),
        fields.Field(
            "act", "activation", str, "swish", (), {"swish": "silu"}, {"silu": "swish", "gelu": "gelu"}
        ),
        fields.Field(
            "head_width", None, int, None, to_hf=lambda cfg: cfg.d_model // cfg.n_heads, optional=True
        ),
        fields.constant("written_only", 0.02),
        fields.required("flag", False),
        fields.tied_head(True),
    )
    cfg = ModelConfig.preset("gpt-mini").replace(activation="gelu", tie_embeddings="none")
    assert fields.to_hf(cfg, "x", "X", table) == {
        "model_type": "x", "architectures": ["X"], "hidden": cfg.d_model, "act": "gelu",
        "head_width": cfg.d_model // cfg.n_heads, "written_only": 0.02, "flag": False,
        "tie_word_embeddings": False,
    }  # fmt: skip


def test_checks_see_the_rows_read_before_them() -> None:
    table = (
        fields.size("width", "d_model", 64),
        fields.Field("heads", "n_heads", int, 4, (fields.at_least_one, fields.divides("width"))),
        fields.Field("pad", "pad_id", int, 0, (fields.token_id("vocab", "other_vocab"),)),
    )
    with pytest.raises(ConfigError) as exc:
        fields.from_hf({"heads": 5}, "x", table)
    assert one_line(exc) == "field 'heads': must divide width=64, got 5"
    with_vocab = (
        fields.size("vocab", "vocab_size", 10),
        fields.Field("other_vocab", None, int, None, optional=True),
        *table,
    )
    assert fields.from_hf({"pad": 9}, "x", with_vocab)[0]["pad_id"] == 9  # other_vocab left out
    with pytest.raises(ConfigError) as exc:
        fields.from_hf({"pad": 9, "other_vocab": 8}, "x", with_vocab)
    assert one_line(exc) == "field 'pad': must be a token id, got 9"


def test_require_names_the_first_field_a_format_cannot_express() -> None:
    cfg = ModelConfig.preset("gpt-mini")
    fields.require(cfg, "Fam", {"arch": "decoder_only"})
    with pytest.raises(ConfigError) as exc:
        fields.require(cfg, "Fam", {"arch": "decoder_only", "norm": "rmsnorm", "ffn": "gated"})
    assert one_line(exc) == f'config field \'model.norm\': Fam needs "rmsnorm", got "{cfg.norm}"'
