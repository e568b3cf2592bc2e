"""GPT-2 checkpoints in Hugging Face's format, both ways, checked against ``transformers`` itself:
the same logits, the same greedy tokens, the same tokenizer ids, and one-line refusals of bad
folders (needs the ``compare`` extra; skipped without it)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from tests.helpers import one_line
from tests.hf import assert_greedy_equals_generate, hf_folder, randomise, write_lm_run
from vaswani.cli import main
from vaswani.config import ModelConfig, RunConfig
from vaswani.errors import ConfigError, DataError, RunDirError
from vaswani.generation.config import DecodingConfig
from vaswani.interop import export_hf, import_hf
from vaswani.interop.gpt2 import config_from_hf, config_to_hf, state_from_hf, state_to_hf
from vaswani.models.gpt import GPT
from vaswani.pipelines.lm import LanguageModel
from vaswani.rundir import RunDir
from vaswani.tokenizer import END_OF_TEXT, LMTokenizer

transformers = pytest.importorskip("transformers")

TEXT = ["the cat sat on the mat", "a dog ran in the park", "héllo wörld, ça va?"]
# Three shapes: tied and untied heads, each activation, n_inner set or not.
HF_CONFIGS: list[dict[str, Any]] = [
    {"n_layer": 1, "n_embd": 32, "n_head": 4, "n_positions": 80, "vocab_size": 40},
    {
        "n_layer": 2, "n_embd": 48, "n_head": 3, "n_positions": 96, "vocab_size": 57, "n_inner": 80,
        "activation_function": "gelu",
    },
    {
        "n_layer": 3, "n_embd": 64, "n_head": 8, "n_positions": 72, "vocab_size": 64,
        "activation_function": "relu", "tie_word_embeddings": False, "layer_norm_epsilon": 1e-6,
    },
]  # fmt: skip


@pytest.fixture(scope="module")
def char_tokenizer() -> LMTokenizer:
    return LMTokenizer.train(TEXT, "char", 0)


def hf_model(seed: int, eos_id: int, **config: Any) -> Any:
    """A ``GPT2LMHeadModel`` with every weight random (biases and LayerNorms too), in eval mode."""
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(bos_token_id=eos_id, eos_token_id=eos_id, **config)
    )
    return randomise(model, ".ln_").eval()  # the LayerNorms' names hold ".ln_"


@torch.no_grad()
def assert_same_logits(hf: Any, ours: GPT, vocab: int) -> None:
    tokens = torch.randint(0, vocab, (3, 17), generator=torch.Generator().manual_seed(1))
    expected = hf(tokens).logits
    assert (ours(tokens) - expected).abs().max() < 1e-4


@pytest.mark.parametrize("config", HF_CONFIGS, ids=["tied", "gelu-n_inner", "relu-untied"])
def test_imported_model_gives_the_logits_of_transformers(tmp_path, char_tokenizer, config):
    hf = hf_model(0, char_tokenizer.eos_id, **config)
    out = import_hf(hf_folder(tmp_path / "hf", hf, char_tokenizer), tmp_path / "run")
    lm = LanguageModel.load(out)
    assert_same_logits(hf, lm.model, config["vocab_size"])
    tied = config.get("tie_word_embeddings", True)
    assert (lm.model.output.weight is lm.model.embed.token.weight) == tied
    assert lm.generate(["the "], DecodingConfig(max_new_tokens=5))  # the run directory is usable as it is


def test_pickled_weights_in_the_original_layout_are_imported(tmp_path, char_tokenizer):
    """pytorch_model.bin with GPT2Model names (no ``transformer.``), the causal-mask buffers and a
    stored tied head, as OpenAI's checkpoint has them, read with ``weights_only=True``."""
    hf = hf_model(1, char_tokenizer.eos_id, **HF_CONFIGS[1])
    src = hf_folder(tmp_path / "hf", hf, char_tokenizer)
    (src / "model.safetensors").unlink()
    state = {k.removeprefix("transformer."): v.clone() for k, v in hf.state_dict().items()}
    for i in range(HF_CONFIGS[1]["n_layer"]):
        state[f"h.{i}.attn.bias"] = torch.ones(1, 1, 96, 96).tril()
        state[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    torch.save(state, src / "pytorch_model.bin")
    lm = LanguageModel.load(import_hf(src, tmp_path / "run"))
    assert_same_logits(hf, lm.model, HF_CONFIGS[1]["vocab_size"])


@pytest.mark.parametrize(
    "changes",
    [{}, {"tie_embeddings": "none", "fused_qkv": False, "activation": "gelu", "d_ff": 72}],
    ids=["tied-fused", "untied-separate-qkv"],
)
def test_exported_run_loads_in_transformers_with_the_same_logits(tmp_path, char_tokenizer, changes):
    cfg = ModelConfig.preset(
        "gpt-mini", n_decoder_layers=2, d_model=48, n_heads=4, d_ff=96, max_len=40, tgt_vocab_size=64
    ).replace(**changes)
    ours = write_lm_run(tmp_path / "run", cfg, char_tokenizer, seed=2)
    out = export_hf(tmp_path / "run", tmp_path / "hf")
    hf, info = transformers.GPT2LMHeadModel.from_pretrained(out, output_loading_info=True)
    assert not any(info.values()), info
    assert_same_logits(hf.eval(), ours, 64)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    for text in TEXT:
        assert hf_tokenizer(text, add_special_tokens=False)["input_ids"] == char_tokenizer.encode(text)


def test_greedy_generation_matches_transformers_token_for_token(tmp_path, char_tokenizer):
    """50 new tokens from one prompt and from a left-padded batch of two; EOS is an id the model
    never produces first, so that all 50 steps are compared."""
    vocab, eos, pad = 48, 47, 0
    hf = hf_model(3, eos, n_layer=2, n_embd=32, n_head=4, n_positions=64, vocab_size=vocab)
    model = LanguageModel.load(
        import_hf(hf_folder(tmp_path / "hf", hf, char_tokenizer), tmp_path / "run")
    ).model
    assert_greedy_equals_generate(model, hf, vocab, eos, pad)


def byte_level_folder(folder: Path) -> Path:
    """A GPT-2 folder whose tokenizer is only vocab.json + merges.txt, trained here."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(TEXT * 5, trainer=trainer)
    eos = tokenizer.token_to_id(END_OF_TEXT)
    hf_model(5, eos, n_layer=1, n_embd=32, n_head=4, n_positions=32, vocab_size=320).save_pretrained(folder)
    tokenizer.model.save(str(folder))
    return folder


def test_byte_level_bpe_from_vocab_and_merges_gives_the_ids_of_transformers(tmp_path):
    src = byte_level_folder(tmp_path / "hf")
    lm = LanguageModel.load(import_hf(src, tmp_path / "run"))
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(src)
    texts = ["the cat", " héllo wörld", "naïve café 🙂🐍", "two\nlines\r\n\ttab", "日本語 ça va?"]
    for text in texts:
        ids = lm.tokenizer.encode(text)
        assert ids == hf_tokenizer(text, add_special_tokens=False)["input_ids"]
        assert lm.tokenizer.decode(ids) == text
    exported = export_hf(tmp_path / "run", tmp_path / "out")
    assert {"vocab.json", "merges.txt", "tokenizer.json"} <= {p.name for p in exported.iterdir()}
    again = transformers.AutoTokenizer.from_pretrained(exported)
    assert [again(t, add_special_tokens=False)["input_ids"] for t in texts] == lm.tokenizer.encode_batch(
        texts
    )


def test_configs_convert_both_ways_and_gpt2_config_reads_ours():
    for config in HF_CONFIGS:
        cfg = config_from_hf({"model_type": "gpt2", **config})
        hf = config_to_hf(cfg)
        assert config_from_hf(hf) == cfg
        read = transformers.GPT2Config(**hf)
        assert (read.n_embd, read.n_layer, read.vocab_size) == (
            cfg.d_model,
            cfg.n_layers,
            cfg.vocab_size,
        )
    assert config_from_hf({"model_type": "gpt2"}) == ModelConfig.preset("gpt2", dropout=0.1, attn_dropout=0.1)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"norm": "post_ln"}, "model.norm"),
        ({"norm": "pre_rmsnorm"}, "model.norm"),
        ({"position": "relative"}, "model.position"),
        ({"attn_window": 8}, "model.attn_window"),
        ({"bias": False}, "model.bias"),
        ({"scale_embeddings": True}, "model.scale_embeddings"),
        ({"activation": "silu"}, "model.activation"),
    ],
)
def test_configs_gpt2_cannot_express_are_refused(changes, field):
    cfg = ModelConfig.preset("gpt-mini").replace(**changes)
    with pytest.raises(ConfigError) as exc:
        config_to_hf(cfg)
    assert field in one_line(exc)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
        ({"reorder_and_upcast_attn": True}, "reorder_and_upcast_attn"),
        ({"add_cross_attention": True}, "add_cross_attention"),
        ({"activation_function": "swish"}, "activation_function"),
        ({"n_head": 5}, "n_head"),
        ({"n_embd": "64"}, "n_embd"),
    ],
)
def test_hf_configs_we_cannot_reproduce_are_refused(changes, field):
    with pytest.raises(ConfigError) as exc:
        config_from_hf({"model_type": "gpt2", **HF_CONFIGS[0], **changes})
    assert f"'{field}'" in one_line(exc)


def test_state_conversion_is_its_own_inverse():
    cfg = config_from_hf(HF_CONFIGS[2])
    model = GPT(cfg)
    state = state_from_hf(state_to_hf(model.state_dict(), cfg), cfg)
    assert state.keys() == model.state_dict().keys()
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())


def malicious_pickle(src: Path, marker: Path) -> None:
    class Payload:
        def __reduce__(self) -> tuple[Any, ...]:
            return os.system, (f"touch {marker}",)

    (src / "model.safetensors").unlink()
    torch.save({"transformer.wte.weight": Payload()}, src / "pytorch_model.bin")


def without_end_of_text(src: Path) -> None:
    Tokenizer(models.BPE(vocab={"a": 0, "b": 1}, merges=[])).save(str(src / "tokenizer.json"))


def edit_config(src: Path, **changes: Any) -> None:
    path = src / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


BAD_FOLDERS = {
    "no folder": (lambda src, tmp: src.rename(tmp / "gone"), DataError, "no such folder"),
    "no config.json": (lambda src, tmp: (src / "config.json").unlink(), DataError, "config.json"),
    "unknown model_type": (lambda src, tmp: edit_config(src, model_type="gptj"), ConfigError, "'gptj'"),
    "shape mismatch": (
        lambda src, tmp: edit_config(src, n_positions=64),
        DataError,
        "transformer.wpe.weight",
    ),
    "no weights": (lambda src, tmp: (src / "model.safetensors").unlink(), DataError, "no weights"),
    "no tokenizer": (lambda src, tmp: (src / "tokenizer.json").unlink(), DataError, "no tokenizer"),
    "pickled code": (lambda src, tmp: malicious_pickle(src, tmp / "marker"), DataError, "could run code"),
    "no <|endoftext|>": (lambda src, tmp: without_end_of_text(src), DataError, "<|endoftext|>"),
}


@pytest.mark.parametrize("case", BAD_FOLDERS)
def test_bad_folders_are_refused_in_one_line_and_nothing_is_written(tmp_path, char_tokenizer, case):
    damage, error, words = BAD_FOLDERS[case]
    src = hf_folder(tmp_path / "hf", hf_model(6, 0, **HF_CONFIGS[0]), char_tokenizer)
    damage(src, tmp_path)
    with pytest.raises(error) as exc:
        import_hf(src, tmp_path / "run")
    assert words in one_line(exc)
    assert not (tmp_path / "marker").exists()
    assert {p.name for p in tmp_path.iterdir()} <= {"hf", "gone"}  # no run, no temporary folder


def test_unknown_model_type_lists_the_supported_ones(tmp_path, char_tokenizer):
    src = hf_folder(tmp_path / "hf", hf_model(6, 0, **HF_CONFIGS[0]), char_tokenizer)
    edit_config(src, model_type="t5")
    with pytest.raises(ConfigError, match="supported: bert, gpt2, llama, marian"):
        import_hf(src, tmp_path / "run")


def test_an_existing_output_folder_is_never_overwritten(tmp_path, char_tokenizer):
    src = hf_folder(tmp_path / "hf", hf_model(6, 0, **HF_CONFIGS[0]), char_tokenizer)
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(RunDirError) as exc:
        import_hf(src, out)
    assert "not empty" in one_line(exc)
    assert [p.name for p in out.iterdir()] == ["keep.txt"] and (out / "keep.txt").read_text() == "mine"
    (out / "keep.txt").unlink()
    assert import_hf(src, out) == out  # an empty folder is filled
    assert {p.name for p in tmp_path.iterdir()} == {"hf", "run"}  # no temporary folder left


def test_runs_of_other_tasks_or_shapes_are_not_exported(tmp_path, char_tokenizer):
    other = tmp_path / "summarization"
    other.mkdir()
    RunDir(other).write_config(RunConfig("summarization", ModelConfig.preset("tiny")))
    with pytest.raises(RunDirError) as exc:
        export_hf(other, tmp_path / "out1")
    assert "'summarization'" in one_line(exc)
    assert "lm (as GPT-2, or Llama with rotary positions), translation (as Marian)" in one_line(exc)
    cfg = ModelConfig.preset("gpt-mini", n_decoder_layers=1, d_model=32, n_heads=4, d_ff=64, norm="post_ln")
    write_lm_run(tmp_path / "post_ln", cfg.replace(tgt_vocab_size=64), char_tokenizer, seed=7)
    with pytest.raises(ConfigError) as exc:
        export_hf(tmp_path / "post_ln", tmp_path / "out2")
    assert "model.norm" in one_line(exc)
    assert not (tmp_path / "out1").exists() and not (tmp_path / "out2").exists()


def test_cli_imports_generates_and_exports(tmp_path, char_tokenizer, capsys):
    src = hf_folder(tmp_path / "hf", hf_model(8, 0, **HF_CONFIGS[0]), char_tokenizer)
    run, out = tmp_path / "runs" / "imported", tmp_path / "out"  # runs/ is made, as by train --out
    assert main(["import-hf", str(src), str(run)]) == 0
    assert main(["generate", str(run), "the", "--max-new-tokens", "5", "--temperature", "0"]) == 0
    assert main(["export-hf", str(run), str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == f"wrote run directory {run} (from {src})"
    assert printed[-1] == f"wrote Hugging Face model folder {out} (from {run})"
    assert main(["import-hf", str(tmp_path / "missing"), str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vaswani: error: ") and err.count("\n") == 1 and "no such folder" in err
