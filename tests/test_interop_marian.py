"""Marian (OPUS-MT) checkpoints in Hugging Face's format, both ways, checked against ``transformers``
itself: the same logits, the same greedy and beam-search tokens, tokenizers with Marian's special
ids, and one-line refusals of bad folders (needs the ``compare`` extra; skipped without it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers import one_line, perturb, write_run_dir
from tests.hf import (
    MARIAN_CONFIGS,
    MARIAN_EOS,
    marian_folder,
    marian_generation_settings,
    marian_model,
    marian_pad,
    marian_sources,
    marian_tokenizer,
)
from vaswani.cli import main
from vaswani.config import ModelConfig, RunConfig, TrainConfig
from vaswani.data.batching import pad
from vaswani.data.config import ParallelData
from vaswani.errors import ConfigError, DataError, RunDirError
from vaswani.generation.config import DecodingConfig
from vaswani.generation.seq2seq import translate_beam_ids, translate_ids
from vaswani.interop import export_hf, import_hf
from vaswani.interop.marian import config_from_hf, config_to_hf
from vaswani.interop.marian_folder import state_from_hf, state_to_hf
from vaswani.layers.positions import sinusoidal_table
from vaswani.models.transformer import Transformer
from vaswani.pipelines.translation import SRC_TOKENIZER, TGT_TOKENIZER, Translator
from vaswani.tokenizer import TextTokenizer

transformers = pytest.importorskip("transformers")

IDS = ["swish-shared", "gelu-separate-tied", "swish-separate-untied"]


@torch.no_grad()
def assert_same_logits(hf: Any, ours: Transformer, config: dict[str, Any]) -> None:
    src, mask = marian_sources(config, seed=1)
    pad = marian_pad(config)
    tgt_in = torch.randint(0, pad, (3, 7), generator=torch.Generator().manual_seed(2))
    tgt_in[:, 0] = pad  # decoding starts from <pad>
    expected = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt_in).logits
    assert (ours(src, tgt_in) - expected).abs().max() < 1e-4


@pytest.fixture(scope="module", params=range(len(MARIAN_CONFIGS)), ids=IDS)
def imported(request, tmp_path_factory) -> tuple[Any, Translator, dict[str, Any]]:
    """A random Marian model, its folder imported as a run, and its config."""
    config = MARIAN_CONFIGS[request.param]
    hf = marian_model(request.param, **config)
    tmp = tmp_path_factory.mktemp("marian")
    run = import_hf(marian_folder(tmp / "hf", hf, config), tmp / "run")
    return hf, Translator.load(run), config


def test_imported_model_gives_the_logits_of_transformers(imported):
    hf, translator, config = imported
    assert_same_logits(hf, translator.model, config)
    model = translator.model
    assert (model.src_embed.token is model.tgt_embed.token) == config.get(
        "share_encoder_decoder_embeddings", True
    )
    assert (model.output.weight is model.tgt_embed.token.weight) == config.get("tie_word_embeddings", True)
    assert translator.tgt_tok.bos_id == translator.tgt_tok.pad_id == marian_pad(config)
    assert translator.tgt_tok.eos_id == MARIAN_EOS


def test_greedy_decoding_matches_transformers_token_for_token(imported):
    hf, translator, config = imported
    src, mask = marian_sources(config, seed=3)
    tok = translator.tgt_tok
    ours = translate_ids(
        translator.model,
        src,
        tok.bos_id,
        tok.eos_id,
        DecodingConfig(max_new_tokens=20),
        suppress=tok.suppressed_ids,
    ).tokens
    theirs = hf.generate(
        input_ids=src,
        attention_mask=mask,
        num_beams=1,
        max_new_tokens=20,
        **marian_generation_settings(config),
    )
    assert torch.equal(ours, theirs[:, 1:])


@pytest.mark.parametrize("alpha", [0.6, 1.5])
def test_beam_search_matches_transformers_token_for_token(imported, alpha):
    """All four hypotheses of each sentence, in order, with their scores."""
    hf, translator, config = imported
    src, mask = marian_sources(config, seed=4)
    tok = translator.tgt_tok
    decoding = DecodingConfig(
        beam=4,
        n_best=4,
        length_penalty_kind="simple",
        length_penalty=alpha,
        early_stopping=True,
        max_new_tokens=12,
    )
    ours = translate_beam_ids(translator.model, src, tok.bos_id, tok.eos_id, decoding, tok.suppressed_ids)
    theirs = hf.generate(
        input_ids=src, attention_mask=mask, num_beams=4, num_return_sequences=4, length_penalty=alpha,
        early_stopping=True, max_new_tokens=12, output_scores=True, return_dict_in_generate=True,
        **marian_generation_settings(config),
    )  # fmt: skip
    assert torch.equal(ours.tokens.flatten(0, 1), theirs.sequences[:, 1:])
    assert torch.allclose(ours.scores.flatten(), theirs.sequences_scores, atol=1e-4)


# (source seed, beams, alpha): between them, each shape has sentences where the three rules differ.
STOPPING_CASES = [(4, 2, 1.0), (8, 4, 2.0)]


def test_beam_search_stopping_rules_match_transformers(imported):
    """``early_stopping`` True, False (Hugging Face's default heuristic) and "never": every
    hypothesis of each sentence, in order, with its score, equals ``generate``'s, 20 new tokens
    at most; and the rules are not vacuous here: True and False differ somewhere, and so do
    False and "never"."""
    hf, translator, config = imported
    tok = translator.tgt_tok
    differ = {"True/False": False, "False/never": False}
    for seed, beams, alpha in STOPPING_CASES:
        src, mask = marian_sources(config, seed=seed)
        found = {}
        for rule in (True, False, "never"):
            decoding = DecodingConfig(
                beam=beams, n_best=beams, length_penalty_kind="simple", length_penalty=alpha,
                early_stopping=rule, max_new_tokens=20,
            )  # fmt: skip
            ours = translate_beam_ids(
                translator.model, src, tok.bos_id, tok.eos_id, decoding, tok.suppressed_ids
            )
            theirs = hf.generate(
                input_ids=src, attention_mask=mask, num_beams=beams, num_return_sequences=beams,
                length_penalty=alpha, early_stopping=rule, max_new_tokens=20, output_scores=True,
                return_dict_in_generate=True, **marian_generation_settings(config),
            )  # fmt: skip
            assert torch.equal(ours.tokens.flatten(0, 1), theirs.sequences[:, 1:]), (seed, rule)
            assert torch.allclose(ours.scores.flatten(), theirs.sequences_scores, atol=1e-4), (seed, rule)
            found[rule] = (ours.tokens, ours.scores)
        for pair, (a, b) in {"True/False": (True, False), "False/never": (False, "never")}.items():
            same = found[a][0].shape == found[b][0].shape and torch.equal(found[a][0], found[b][0])
            differ[pair] |= not (same and torch.allclose(found[a][1], found[b][1]))
    assert all(differ.values()), differ


def test_translator_encodes_and_decodes_with_marians_special_ids(imported):
    """Sources get </s> appended; translations start from <pad>, stop at </s> and never hold <pad>."""
    hf, translator, config = imported
    assert translator.src_tok.encode("w5 w7 w2") == [5, 7, 2, MARIAN_EOS]
    text = ["w5 w7 w2 w9", "w3"]
    src = [translator.src_tok.encode(t) for t in text]
    ids = hf.generate(
        input_ids=torch.tensor([src[0], src[1] + [marian_pad(config)] * 3]),
        attention_mask=torch.tensor([[1] * 5, [1, 1, 0, 0, 0]]), num_beams=1, max_new_tokens=20,
        **marian_generation_settings(config),
    )  # fmt: skip
    expected = [translator.tgt_tok.decode(row[1:]) for row in ids.tolist()]
    assert translator.translate(text, DecodingConfig(max_len_a=0, max_len_b=20)) == expected


@pytest.mark.parametrize(
    "changes",
    [
        {"fused_qkv": True},
        {
            "tie_embeddings": "none", "src_vocab_size": 90, "activation": "silu", "output_bias": True,
            "position": "sinusoidal_halves", "scale_embeddings": False,
        },
    ],
    ids=["paper-interleaved-fused-shared", "halves-untied-silu-bias"],
)  # fmt: skip
def test_exported_run_loads_in_transformers_with_the_same_logits_and_tokens(tmp_path, changes):
    """A vaswani run (vaswani's own special ids, the paper's interleaved positions) and a Marian-like
    one: no missing or unexpected keys, the same logits, the same greedy translation."""
    cfg = ModelConfig.preset(
        "tiny", d_model=32, n_heads=4, d_ff=48, n_encoder_layers=2, n_decoder_layers=2, max_len=48,
        src_vocab_size=64, tgt_vocab_size=64, activation="relu",
    ).replace(**changes)  # fmt: skip
    texts = ["the cat sat on the mat", "a dog ran in the park", "le chat est sur le tapis"] * 3
    tokenizer = TextTokenizer.train_bpe(texts, 60, min_frequency=1)
    torch.manual_seed(5)
    ours = perturb(Transformer(cfg).eval(), 0.3)
    run = RunConfig("translation", cfg, TrainConfig(), ParallelData(source="default"))
    run_dir = write_run_dir(tmp_path / "run", run, ours, {SRC_TOKENIZER: tokenizer, TGT_TOKENIZER: tokenizer})
    out = export_hf(run_dir, tmp_path / "hf")
    hf, info = transformers.MarianMTModel.from_pretrained(out, output_loading_info=True)
    assert not any(info.values()), info
    hf.eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert [hf_tokenizer(text)["input_ids"] for text in texts] == tokenizer.encode_batch(texts)
    first, second = tokenizer.encode_batch([texts[0], texts[2]])
    src = pad([first, second[:3]], tokenizer.pad_id)
    mask = src != tokenizer.pad_id
    tgt_in = torch.tensor([[1, 5, 9, 13, 20], [1, 7, 7, 30, 2]])
    with torch.no_grad():
        expected = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt_in).logits
        assert (ours(src, tgt_in) - expected).abs().max() < 1e-4
    translator = Translator.load(run_dir)
    theirs = hf.generate(input_ids=src, attention_mask=mask, max_new_tokens=15, do_sample=False, num_beams=1)
    decoding = DecodingConfig(max_new_tokens=15)
    greedy = translate_ids(translator.model, src, tokenizer.bos_id, tokenizer.eos_id, decoding).tokens
    assert torch.equal(greedy, theirs[:, 1:])
    again = Translator.load(import_hf(out, tmp_path / "again"))  # and back: the same model
    with torch.no_grad():
        assert (again.model(src, tgt_in) - ours(src, tgt_in)).abs().max() < 1e-4
    assert again.translate([texts[0]]) == translator.translate([texts[0]])


def test_configs_convert_both_ways_and_state_conversion_is_its_own_inverse():
    tokenizer = TextTokenizer(marian_tokenizer(70, 69, source=False))
    for config in MARIAN_CONFIGS:
        hf = {"model_type": "marian", **config, "pad_token_id": marian_pad(config)}
        cfg = config_from_hf(hf)
        if marian_pad(config) == 69:
            assert config_from_hf(config_to_hf(cfg, tokenizer)) == cfg
        model = Transformer(cfg)
        state = state_from_hf(state_to_hf(model.state_dict(), cfg), cfg)
        assert state.keys() == model.state_dict().keys()
        assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    real = config_from_hf({"model_type": "marian", "activation_function": "swish", "scale_embedding": True})
    assert (real.position, real.norm, real.norm_placement, real.activation, real.tie_embeddings) == (
        "sinusoidal_halves", "layernorm", "post", "silu", "all",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "message"),
    [  # MarianConfig's defaults are 16 heads and a width of 4096 on both sides
        (
            {"encoder_attention_heads": 4},
            "field 'decoder_attention_heads': must equal encoder_attention_heads=4 ",
        ),
        (
            {"encoder_ffn_dim": 64},
            "field 'decoder_ffn_dim': must equal encoder_ffn_dim=64 (one value for both stacks), got 4096",
        ),
        (
            {"encoder_attention_heads": 0, "decoder_attention_heads": 0},
            "field 'encoder_attention_heads': must be >= 1",
        ),
        ({"encoder_ffn_dim": 0, "decoder_ffn_dim": 0}, "field 'encoder_ffn_dim': must be >= 1, got 0"),
    ],
)
def test_sizes_of_both_stacks_are_refused_naming_the_config_field(changes, message):
    """A decoder size left out is MarianConfig's default (no KeyError), and a refused size names the
    field of config.json, not an inner name."""
    with pytest.raises(ConfigError) as exc:
        config_from_hf({"model_type": "marian", **changes})
    assert message in one_line(exc)


def test_marians_position_table_is_ours_in_halves():
    """Marian's own table (sines in the first half, cosines in the second), also for odd widths."""
    for d_model in (32, 7):
        table = transformers.models.marian.modeling_marian.MarianSinusoidalPositionalEmbedding(
            40, d_model
        ).create_weight()
        assert torch.allclose(sinusoidal_table(40, d_model, halves=True), table, atol=1e-6)


def test_pickled_weights_with_every_tied_copy_are_imported(tmp_path):
    """pytorch_model.bin as older OPUS-MT checkpoints hold it: every embedding copy, the head and the
    position tables stored, read with ``weights_only=True``."""
    config = MARIAN_CONFIGS[0]
    hf = marian_model(6, **config)
    src = marian_folder(tmp_path / "hf", hf, config)
    (src / "model.safetensors").unlink()
    torch.save({k: v.clone() for k, v in hf.state_dict().items()}, src / "pytorch_model.bin")
    assert "model.encoder.embed_positions.weight" in hf.state_dict()
    translator = Translator.load(import_hf(src, tmp_path / "run"))
    assert_same_logits(hf, translator.model, config)


def edit_config(src: Path, **changes: Any) -> None:
    path = src / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def learned_positions(src: Path) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(src / "model.safetensors"))
    tensors["model.encoder.embed_positions.weight"] = torch.randn(64, 32)
    save_file(tensors, str(src / "model.safetensors"), metadata={"format": "pt"})


def changed(**changes: Any) -> Any:
    return lambda src: edit_config(src, **changes)


BAD_FOLDERS = {
    "unknown model_type": (changed(model_type="t5"), ConfigError, "'t5'"),
    "shape mismatch": (
        changed(encoder_ffn_dim=40, decoder_ffn_dim=40), DataError, "model.encoder.layers.0.fc1.weight",
    ),
    "heads differ": (changed(decoder_attention_heads=4), ConfigError, "'decoder_attention_heads'"),
    "activation": (changed(activation_function="tanh"), ConfigError, "'activation_function'"),
    "layerdrop": (changed(encoder_layerdrop=0.1), ConfigError, "'encoder_layerdrop'"),
    "start token": (changed(decoder_start_token_id=3), ConfigError, "'decoder_start_token_id'"),
    "no tokenizer": (lambda src: (src / "tokenizer.json").unlink(), DataError, "no tokenizer.json"),
    "learned positions": (learned_positions, DataError, "model.encoder.embed_positions.weight"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD_FOLDERS)
def test_bad_folders_are_refused_in_one_line_and_nothing_is_written(tmp_path, case):
    damage, error, words = BAD_FOLDERS[case]
    src = marian_folder(tmp_path / "hf", marian_model(7, **MARIAN_CONFIGS[0]), MARIAN_CONFIGS[0])
    damage(src)
    with pytest.raises(error) as exc:
        import_hf(src, tmp_path / "run")
    assert words in one_line(exc)
    assert {p.name for p in tmp_path.iterdir()} == {"hf"}  # no run, no temporary folder


def test_an_existing_output_folder_is_never_overwritten(tmp_path):
    src = marian_folder(tmp_path / "hf", marian_model(8, **MARIAN_CONFIGS[0]), MARIAN_CONFIGS[0])
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(RunDirError) as exc:
        import_hf(src, out)
    assert "not empty" in one_line(exc)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"norm": "pre_ln"}, "model.norm"),
        ({"position": "learned"}, "model.position"),
        ({"attn_window": 4}, "model.attn_window"),
        ({"bias": False}, "model.bias"),
        ({"norm_eps": 1e-6}, "model.norm_eps"),
    ],
)
def test_configs_marian_cannot_express_are_refused(changes, field):
    tokenizer = TextTokenizer(marian_tokenizer(64, 63, source=False))
    with pytest.raises(ConfigError) as exc:
        config_to_hf(
            ModelConfig.preset("tiny", src_vocab_size=64, tgt_vocab_size=64).replace(**changes), tokenizer
        )
    assert field in one_line(exc)


def test_cli_imports_translates_and_exports(tmp_path, capsys):
    config = MARIAN_CONFIGS[0]
    src = marian_folder(tmp_path / "hf", marian_model(9, **config), config)
    run, out = tmp_path / "run", tmp_path / "out"
    assert main(["import-hf", str(src), str(run)]) == 0
    assert main(["translate", str(run), "w5 w7 w9", "--beam", "2"]) == 0
    assert main(["export-hf", str(run), str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == f"wrote run directory {run} (from {src})"
    assert printed[-1] == f"wrote Hugging Face model folder {out} (from {run})"
    assert json.loads((out / "generation_config.json").read_text())["bad_words_ids"] == [[marian_pad(config)]]
