"""Llama checkpoints in Hugging Face's format, both ways, checked against ``transformers`` itself:
the same logits, the same greedy tokens (a left-padded batch too), configs that convert both ways,
and one-line refusals of what either side cannot hold (needs the ``compare`` extra; skipped
without it). The CLI, the tokenizers, the ``llama-mini`` preset and few-shot prompting are in
``test_interop_llama_runs.py``."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.helpers import one_line
from tests.hf import assert_greedy_equals_generate, hf_folder, randomise, write_lm_run
from vaswani.config import ModelConfig
from vaswani.errors import ConfigError
from vaswani.interop import export_hf, import_hf
from vaswani.interop.llama import config_from_hf, config_to_hf, state_from_hf, state_to_hf
from vaswani.models.gpt import GPT
from vaswani.pipelines.lm import LanguageModel
from vaswani.tokenizer import LMTokenizer

transformers = pytest.importorskip("transformers")

TEXT = ["the cat sat on the mat", "a dog ran in the park", "héllo wörld, ça va?"]
# Grouped-query with an untied head and rope_theta 500000 (Llama 3's), plain multi-head with a tied
# head, and multi-query with biases, the tanh GELU and rope_theta 1000.
HF_CONFIGS: list[dict[str, Any]] = [
    {
        "hidden_size": 64, "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 96,
        "num_hidden_layers": 2, "vocab_size": 80, "max_position_embeddings": 96, "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
    },
    {
        "hidden_size": 48, "num_attention_heads": 4, "intermediate_size": 128, "num_hidden_layers": 1,
        "vocab_size": 64, "max_position_embeddings": 80, "tie_word_embeddings": True,
    },
    {
        "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 1, "intermediate_size": 56,
        "num_hidden_layers": 3, "vocab_size": 70, "max_position_embeddings": 72, "rope_theta": 1000.0,
        "attention_bias": True, "mlp_bias": True, "hidden_act": "gelu_pytorch_tanh",
        "tie_word_embeddings": False,
    },
]  # fmt: skip
IDS = ["gqa-untied-theta5e5", "mha-tied", "mqa-bias-gelu"]
SEEN: list[float] = []  # every max |logit difference| measured here (the report's figure)


@pytest.fixture(scope="module")
def char_tokenizer() -> LMTokenizer:
    return LMTokenizer.train(TEXT, "char", 0)


def hf_llama(seed: int, **config: Any) -> Any:
    """A ``LlamaForCausalLM`` with every weight random (norm gains and biases too), in eval mode;
    BOS and EOS are the character tokenizer's <|endoftext|> (id 0)."""
    torch.manual_seed(seed)
    hf_config = transformers.LlamaConfig(bos_token_id=0, eos_token_id=0, **config)
    return randomise(transformers.LlamaForCausalLM(hf_config), "norm").eval()


def llama_cfg(**changes: Any) -> ModelConfig:
    """A small llama-mini (2 layers, 48 wide, 4 heads over 2 key/value heads, context 40)."""
    sizes = {"n_decoder_layers": 2, "d_model": 48, "n_heads": 4, "n_kv_heads": 2, "d_ff": 80, "max_len": 40}
    return ModelConfig.preset("llama-mini", **sizes, tgt_vocab_size=64).replace(**changes)


@torch.no_grad()
def assert_same_logits(hf: Any, ours: GPT, vocab: int) -> None:
    """The logits of both on three random rows of 17 tokens, and of a left-padded batch (position
    ids from the mask: Hugging Face takes them from ``attention_mask``), within 1e-4."""
    tokens = torch.randint(0, vocab, (3, 17), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 17, dtype=torch.bool)
    mask[1, :5], mask[2, :11] = False, False
    difference = (ours(tokens) - hf(tokens).logits).abs().max()
    padded = (ours(tokens, attention_mask=mask) - hf(tokens, attention_mask=mask.long()).logits).abs()
    padded_difference = padded[mask].max()
    SEEN.extend([float(difference), float(padded_difference)])
    assert difference < 1e-4 and padded_difference < 1e-4


@pytest.mark.parametrize("config", HF_CONFIGS, ids=IDS)
def test_imported_model_gives_the_logits_of_transformers(tmp_path, char_tokenizer, config):
    hf = hf_llama(0, **config)
    lm = LanguageModel.load(import_hf(hf_folder(tmp_path / "hf", hf, char_tokenizer), tmp_path / "run"))
    assert_same_logits(hf, lm.model, config["vocab_size"])
    assert (lm.model.output.weight is lm.model.embed.token.weight) == config["tie_word_embeddings"]
    assert lm.model.config.n_kv_heads == (config.get("num_key_value_heads") or None)
    assert lm.model.config.rope_theta == config.get("rope_theta", 10000.0)


def test_pickled_weights_of_llama_model_names_with_rotary_buffers_are_imported(tmp_path, char_tokenizer):
    """pytorch_model.bin with LlamaModel names (no ``model.``), a stored tied head and the
    ``rotary_emb.inv_freq`` buffers older checkpoints carry."""
    hf = hf_llama(1, **HF_CONFIGS[1])
    src = hf_folder(tmp_path / "hf", hf, char_tokenizer)
    (src / "model.safetensors").unlink()
    state = {k.removeprefix("model."): v.clone() for k, v in hf.state_dict().items()}
    state["lm_head.weight"] = hf.lm_head.weight.detach().clone()
    state["layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(6)
    torch.save(state, src / "pytorch_model.bin")
    lm = LanguageModel.load(import_hf(src, tmp_path / "run"))
    assert_same_logits(hf, lm.model, HF_CONFIGS[1]["vocab_size"])


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"tie_embeddings": "none", "n_kv_heads": None, "rope_theta": 300.0},
        {"fused_qkv": True, "position": "rope_interleaved", "n_kv_heads": 1},
        {"bias": True, "activation": "gelu", "norm_eps": 1e-6},
    ],
    ids=["llama-mini", "mha-untied-theta300", "fused-interleaved-mqa", "bias-gelu"],
)
def test_exported_run_loads_in_transformers_with_the_same_logits(tmp_path, char_tokenizer, changes):
    ours = write_lm_run(tmp_path / "run", llama_cfg(**changes), char_tokenizer, seed=2)
    out = export_hf(tmp_path / "run", tmp_path / "hf")
    hf, info = transformers.LlamaForCausalLM.from_pretrained(out, output_loading_info=True)
    assert not any(info.values()), info
    assert_same_logits(hf.eval(), ours, 64)
    again = LanguageModel.load(import_hf(out, tmp_path / "back")).model
    assert_same_logits(hf, again, 64)  # and back: rope_interleaved comes back as (equal) half-split rope


@pytest.mark.parametrize("direction", ["import", "export"])
def test_greedy_generation_matches_transformers_token_for_token(tmp_path, char_tokenizer, direction):
    """50 new tokens from one prompt and from a left-padded batch of two; EOS is the id after the
    vocabulary, which no model produces, so that all 50 steps are compared."""
    vocab, eos, pad = 64, 64, 0
    if direction == "import":
        hf = hf_llama(3, **{**HF_CONFIGS[0], "vocab_size": vocab})
        model = LanguageModel.load(
            import_hf(hf_folder(tmp_path / "hf", hf, char_tokenizer), tmp_path / "run")
        ).model
    else:
        model = write_lm_run(tmp_path / "run", llama_cfg(max_len=80), char_tokenizer, seed=3)
        hf = transformers.LlamaForCausalLM.from_pretrained(
            export_hf(tmp_path / "run", tmp_path / "hf")
        ).eval()
    assert_greedy_equals_generate(model, hf, vocab, eos, pad)


def test_configs_convert_both_ways_and_llama_config_reads_ours():
    for config in HF_CONFIGS:
        cfg = config_from_hf({"model_type": "llama", **config})
        hf = config_to_hf(cfg)
        assert config_from_hf(hf) == cfg
        read = transformers.LlamaConfig(**hf)
        assert (read.hidden_size, read.num_key_value_heads, read.rope_parameters["rope_theta"]) == (
            cfg.d_model,
            cfg.n_kv_heads or cfg.n_heads,
            cfg.rope_theta,
        )
    new_style = {**HF_CONFIGS[0], "rope_parameters": {"rope_type": "default", "rope_theta": 123.0}}
    del new_style["rope_theta"]
    assert config_from_hf(new_style).rope_theta == 123.0  # transformers 5 writes rope_parameters
    default = config_from_hf({"model_type": "llama"})  # LlamaConfig's defaults: Llama 2 7B
    assert (default.d_model, default.n_layers, default.d_ff, default.norm_eps) == (4096, 32, 11008, 1e-6)


def test_state_conversion_is_its_own_inverse():
    cfg = config_from_hf(HF_CONFIGS[2])
    model = GPT(cfg)
    state = state_from_hf(state_to_hf(model.state_dict(), cfg), cfg)
    assert state.keys() == model.state_dict().keys()
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("kind", ["linear", "dynamic", "yarn", "llama3", "longrope"])
@pytest.mark.parametrize("where", ["rope_scaling", "rope_parameters"])
def test_rope_scaling_other_than_default_is_refused_naming_it(kind, where):
    scaling = {"rope_type": kind, "factor": 2.0}
    with pytest.raises(ConfigError) as exc:
        config_from_hf({**HF_CONFIGS[0], where: scaling})
    assert "'rope_scaling'" in one_line(exc) and f"'{kind}'" in one_line(exc)
    for fine in (None, {"rope_type": "default"}, {"type": "default", "rope_theta": 10.0}):
        assert config_from_hf({**HF_CONFIGS[0], "rope_scaling": fine}).position == "rope"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"head_dim": 16}, "head_dim"),
        ({"attention_bias": True}, "mlp_bias"),
        ({"hidden_act": "tanh"}, "hidden_act"),
        ({"num_key_value_heads": 3}, "num_key_value_heads"),
        ({"num_attention_heads": 5}, "num_attention_heads"),
        ({"hidden_size": 24, "num_attention_heads": 8}, "num_attention_heads"),  # a head of 3: odd
        ({"rope_theta": "big"}, "rope_theta"),
        ({"model_type": "mistral"}, "model_type"),
    ],
)
def test_hf_configs_we_cannot_reproduce_are_refused(changes, field):
    with pytest.raises(ConfigError) as exc:
        config_from_hf({**HF_CONFIGS[0], **changes})
    assert f"'{field}'" in one_line(exc)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"norm": "layernorm"}, "model.norm"),
        ({"norm_placement": "post"}, "model.norm_placement"),
        ({"ffn": "plain"}, "model.ffn"),
        ({"attn_window": 8}, "model.attn_window"),
        ({"scale_embeddings": True}, "model.scale_embeddings"),
        ({"position": "alibi"}, "model.position"),
        ({"output_bias": True}, "model.output_bias"),
    ],
)
def test_configs_llama_cannot_express_are_refused(changes, field):
    with pytest.raises(ConfigError) as exc:
        config_to_hf(llama_cfg(**changes))
    assert field in one_line(exc)


def test_a_rotary_run_llama_cannot_hold_is_refused_on_export_and_nothing_is_written(tmp_path, char_tokenizer):
    write_lm_run(tmp_path / "run", llama_cfg(norm="layernorm"), char_tokenizer, seed=5)
    with pytest.raises(ConfigError) as exc:
        export_hf(tmp_path / "run", tmp_path / "out")
    assert "Llama" in one_line(exc) and "model.norm" in one_line(exc)
    assert not (tmp_path / "out").exists()
