"""LoRA (:mod:`vaswani.layers.lora`, ``--lora R``): an adapted model starts as its base, only the
adapters (and a new head) get gradients, merged and unmerged models compute the same, a LoRA run
resumes exactly, its adapters load in PEFT on the Hugging Face export of its base with the same
logits (GPT-2, Llama, BERT; skipped without ``peft``), and bad settings are refused in one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import (
    COUNTING,
    encoder_run,
    tiny_args,
    tiny_lm_run,
    tiny_mlm_run,
    write_lm_text,
    write_reverse_task,
    write_sentiment,
)
from vaswani.cli import main
from vaswani.config import ModelConfig, TrainConfig
from vaswani.errors import ConfigError
from vaswani.layers.lora import LoRALinear, adapter_state, apply_lora, merge_lora, merged_copy, merged_state
from vaswani.models.bert import BertClassifier
from vaswani.models.gpt import GPT
from vaswani.pipelines.classify import TextClassifier
from vaswani.pipelines.lm import LanguageModel
from vaswani.pipelines.translation import Translator
from vaswani.training.averaging import newest_checkpoints

TINY_GPT = ModelConfig.preset(
    "gpt-mini", vocab_size=64, d_model=32, n_heads=4, d_ff=64, n_layers=2, max_len=16
)
TINY_BERT = ModelConfig.preset(
    "bert-base", vocab_size=64, d_model=32, n_heads=4, d_ff=64, n_layers=1, max_len=16, dropout=0.0,
    attn_dropout=0.0,
)  # fmt: skip
LLAMA = ("--preset", "llama-mini", "--d-model", "32", "--heads", "4", "--n-kv-heads", "2", "--d-ff", "64")


def randomised_adapters(model: torch.nn.Module) -> None:
    """Give every adapter a non-zero B (as training would)."""
    torch.manual_seed(1)
    for module in model.modules():
        if isinstance(module, LoRALinear):
            torch.nn.init.normal_(module.lora_B, std=0.2)


def test_an_adapted_model_starts_as_its_base():
    torch.manual_seed(0)
    model = GPT(TINY_GPT).eval()
    ids = torch.randint(0, 64, (2, 10))
    before = model(ids)
    wrapped = apply_lora(model, 4, 8.0, 0.0, ("q_proj", "v_proj", "linear1"))
    assert wrapped == [
        f"blocks.layers.{i}.{m}" for i in range(2) for m in ("self_attn.qkv_proj", "ffn.linear1")
    ]
    assert torch.equal(model(ids), before)


def test_only_the_adapters_and_the_new_head_get_gradients():
    torch.manual_seed(0)
    model = BertClassifier(TINY_BERT.replace(fused_qkv=True), n_classes=3)
    apply_lora(model, 2, 4.0, 0.1, ("q_proj", "v_proj"))
    randomised_adapters(model)
    model(torch.randint(0, 64, (3, 8))).sum().backward()
    trained = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trained == {n for n, _ in model.named_parameters() if ".lora_" in n or n.startswith("head.")}
    assert all(p.grad is None for n, p in model.named_parameters() if n not in trained)
    qkv = model.bert.blocks.layers[0].self_attn.qkv_proj
    assert qkv.lora_B.grad[32:64].abs().sum() == 0  # the rows of K are not adapted
    assert qkv.lora_B.grad[:32].abs().sum() > 0 and qkv.lora_B.grad[64:].abs().sum() > 0


@pytest.mark.parametrize("gated", [False, True])
def test_merged_and_unmerged_models_compute_the_same(gated):
    torch.manual_seed(0)
    cfg = TINY_GPT.replace(ffn="gated", activation="silu") if gated else TINY_GPT
    model = GPT(cfg).eval()
    targets = ("q_proj", "k_proj", "out_proj", "gate_proj", "down_proj") if gated else ("v_proj", "linear2")
    apply_lora(model, 4, 16.0, 0.0, targets)
    randomised_adapters(model)
    ids = torch.randint(0, 64, (2, 10))
    adapted = model(ids)
    keys = set(model.state_dict())
    merged = merged_copy(model)
    assert set(model.state_dict()) == keys  # the copy leaves the model as it is
    assert not any(isinstance(m, LoRALinear) for m in merged.modules())
    assert set(merged.state_dict()) == set(GPT(cfg).state_dict())
    torch.testing.assert_close(merged(ids), adapted, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(merge_lora(model)(ids), adapted, atol=1e-5, rtol=1e-5)


def lora_run(base: Path, out: Path, text: Path, *extra: str) -> list[str]:
    return [
        "train", "lm", "--text", str(text), "--init", str(base), "--out", str(out), "--lora", "4",
        "--lora-alpha", "16", "--max-steps", "8", "--batch-tokens", "256", "--lr", "3e-2", "--warmup", "2",
        "--eval-every", "1000", "--quiet", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def gpt_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_lm_run(tmp_path_factory.mktemp("gpt"), "--max-steps", "5", "--fused-qkv")


def test_a_lora_run_holds_merged_weights_and_its_adapters(gpt_base, tmp_path):
    text = write_lm_text(tmp_path / "new.txt", seed=1)
    assert main(lora_run(gpt_base, tmp_path / "lora", text)) == 0
    adapter = load_file(tmp_path / "lora" / "adapter.safetensors")
    assert set(adapter) == {
        "blocks.layers.0.self_attn.qkv_proj.lora_A",
        "blocks.layers.0.self_attn.qkv_proj.lora_B",
    }
    base, tuned = (
        load_file(gpt_base / "model.safetensors"),
        load_file(tmp_path / "lora" / "model.safetensors"),
    )
    assert base.keys() == tuned.keys()
    changed = {k for k in base if not torch.equal(base[k], tuned[k])}
    assert changed == {"blocks.layers.0.self_attn.qkv_proj.weight"}  # q, v merged; all else frozen
    d = 32
    assert torch.equal(
        base["blocks.layers.0.self_attn.qkv_proj.weight"][d : 2 * d],
        tuned["blocks.layers.0.self_attn.qkv_proj.weight"][d : 2 * d],
    )
    train = json.loads((tmp_path / "lora" / "config.json").read_text())["train"]
    assert (train["lora_rank"], train["lora_alpha"], train["lora_targets"]) == (4, 16.0, ["q_proj", "v_proj"])


def test_a_lora_run_resumes_exactly(gpt_base, tmp_path):
    text = write_lm_text(tmp_path / "new.txt", seed=1)
    common = ("--deterministic", "--lora-dropout", "0.1", "--checkpoint-every", "4", "--schedule", "constant")
    assert main(lora_run(gpt_base, tmp_path / "whole", text, *common)) == 0
    assert main(lora_run(gpt_base, tmp_path / "parts", text, *common, "--max-steps", "4")) == 0
    first = load_file(tmp_path / "parts" / "adapter.safetensors")
    assert main(["train", "lm", "--resume", str(tmp_path / "parts"), "--max-steps", "8", "--quiet"]) == 0
    for name in ("model.safetensors", "adapter.safetensors"):
        whole, parts = load_file(tmp_path / "whole" / name), load_file(tmp_path / "parts" / name)
        assert whole.keys() == parts.keys()
        assert all(torch.equal(whole[k], parts[k]) for k in whole), name
    assert any(not torch.equal(first[k], parts[k]) for k in first)


def hf_lm_logits(base: Path, adapter: Path, ids: torch.Tensor, tmp_path: Path) -> torch.Tensor:
    """The logits of PEFT's model: the Hugging Face export of ``base`` with ``adapter`` loaded."""
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    assert main(["export-hf", str(base), str(tmp_path / "hf")]) == 0
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        return peft.PeftModel.from_pretrained(hf, adapter).eval()(input_ids=ids).logits


@pytest.mark.parametrize(
    "family",
    [
        ("--fused-qkv",),
        (*LLAMA, "--lora-targets", "q_proj,v_proj,down_proj"),
        (*LLAMA, "--position", "rope_interleaved", "--fused-qkv", "--lora-targets", "q_proj,k_proj,up_proj"),
    ],
    ids=["gpt2", "llama", "llama-fused-interleaved"],
)
def test_peft_loads_the_adapters_of_an_lm_run_with_the_same_logits(family, tmp_path):
    pytest.importorskip("peft")
    model_flags = [f for f in family if not f.startswith("--lora") and "," not in f]
    base = tiny_lm_run(tmp_path, "--max-steps", "3", *model_flags)
    text = write_lm_text(tmp_path / "new.txt", seed=1)
    lora_flags = family[family.index("--lora-targets") :] if "--lora-targets" in family else ()
    assert main(lora_run(base, tmp_path / "lora", text, *lora_flags)) == 0
    assert main(["export-peft", str(tmp_path / "lora"), str(tmp_path / "adapter")]) == 0
    lm = LanguageModel.load(tmp_path / "lora", torch.device("cpu"))
    ids = torch.randint(3, 20, (2, 12))
    theirs = hf_lm_logits(base, tmp_path / "adapter", ids, tmp_path)
    with torch.no_grad():
        ours = lm.model(ids)[..., : theirs.shape[-1]]
        base_logits = LanguageModel.load(base, torch.device("cpu")).model(ids)[..., : theirs.shape[-1]]
    assert (ours - base_logits).abs().max() > 1e-3  # the adapters changed the model
    torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=1e-4)


def test_peft_loads_the_adapters_of_a_bert_classifier_on_its_encoder(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    encoder = encoder_run(tmp_path)
    train, dev = write_sentiment(tmp_path, "train", 64, 0), write_sentiment(tmp_path, "dev", 16, 1)
    args = [
        "train", "classify", "--train", str(train), "--dev", str(dev), "--init", str(encoder),
        "--out", str(tmp_path / "lora"), "--lora", "2", "--lora-targets", "q_proj,v_proj,linear1",
        "--max-steps", "6", "--lr", "5e-2", "--batch-size", "16", "--quiet",
    ]  # fmt: skip
    assert main(args) == 0
    adapter = load_file(tmp_path / "lora" / "adapter.safetensors")
    assert any(k.startswith("head.") for k in adapter)  # the new head is trained in full
    capsys.readouterr()
    assert main(["export-peft", str(tmp_path / "lora"), str(tmp_path / "adapter")]) == 0
    assert "head.linear.bias" in capsys.readouterr().err  # left out, said so
    assert main(["export-hf", str(encoder), str(tmp_path / "hf")]) == 0
    hf = peft.PeftModel.from_pretrained(
        transformers.BertModel.from_pretrained(tmp_path / "hf"), tmp_path / "adapter"
    )
    ours = TextClassifier.load(tmp_path / "lora", torch.device("cpu")).model.bert.eval()
    ids = torch.randint(5, 60, (2, 9))
    mask = torch.ones_like(ids, dtype=torch.bool)
    with torch.no_grad():
        theirs = hf.eval()(input_ids=ids, attention_mask=mask.long()).last_hidden_state
        torch.testing.assert_close(theirs, ours(ids, None, mask), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (("--lora", "0"), "--lora: "),
        (("--lora", "2", "--lora-targets", "q_proj,query"), "--lora-targets: "),
        (("--lora", "2", "--lora-dropout", "1"), "--lora-dropout: "),
        (("--lora", "2", "--lora-targets", "gate_proj"), "--lora-targets: "),
        ((), "--lora-alpha: "),  # lora_run's --lora-alpha 16, without --lora
    ],
    ids=["rank-0", "unknown-target", "dropout-1", "absent-target", "no-rank"],
)
def test_bad_lora_settings_are_refused_in_one_line(gpt_base, tmp_path, capsys, flags, named):
    text = write_lm_text(tmp_path / "new.txt", seed=1)
    args = [a for a in lora_run(gpt_base, tmp_path / "bad", text) if a not in ("--lora", "4")]
    capsys.readouterr()
    assert main([*args, *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vaswani: error: {named}") and err.count("\n") == 1, err


def test_lora_is_not_sharded():
    with pytest.raises(ConfigError, match="LoRA adapters are not sharded"):
        TrainConfig(lora_rank=4, fsdp=True)


def test_lora_needs_a_pretrained_model(tmp_path, capsys):
    text = write_lm_text(tmp_path / "train.txt")
    capsys.readouterr()
    args = ["train", "lm", "--text", str(text), "--out", str(tmp_path / "run"), "--lora", "4", "--quiet"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("vaswani: error: --lora: ") and "--init" in err and err.count("\n") == 1


def test_adapter_state_is_the_trained_tensors():
    model = BertClassifier(TINY_BERT, n_classes=2)
    apply_lora(model, 2, 2.0, 0.0, ("q_proj",))
    state = adapter_state(model)
    assert set(state) == {
        "bert.blocks.layers.0.self_attn.q_proj.lora_A", "bert.blocks.layers.0.self_attn.q_proj.lora_B",
        "head.linear.weight", "head.linear.bias",
    }  # fmt: skip


def changed_tensors(before: Path, after: Path) -> set[str]:
    """The names of the weights that differ between two runs' ``model.safetensors`` (same keys)."""
    a, b = load_file(before / "model.safetensors"), load_file(after / "model.safetensors")
    return {k for k in a if k in b and not torch.equal(a[k], b[k])}


def test_train_translation_init_with_lora_changes_only_the_adapted_projections(tmp_path, capsys):
    src, tgt = write_reverse_task(tmp_path)
    assert main(tiny_args(src, tgt, tmp_path / "base")) == 0
    args = ["train", "translation", "--src", str(src), "--tgt", str(tgt), "--init", str(tmp_path / "base")]
    assert main([*args, "--out", str(tmp_path / "lora"), "--lora", "2", "--max-steps", "3", "--quiet"]) == 0
    changed = changed_tensors(tmp_path / "base", tmp_path / "lora")
    assert changed and all(re.search(r"_attn\.(q|v|qkv|kv)_proj\.weight$", k) for k in changed), changed
    assert any(".cross_attn." in k for k in changed) and any(".self_attn." in k for k in changed)
    capsys.readouterr()
    assert main(["translate", str(tmp_path / "lora"), "a b c"]) == 0  # the merged run decodes as any


def test_train_tag_init_with_lora_trains_the_adapters_and_the_new_head(tmp_path):
    mlm = tiny_mlm_run(tmp_path)
    rows = "".join(
        f"{i + 1}\t{w}\t_\t{'NUM' if w in COUNTING else 'X'}\t_\t_\t_\t_\t_\t_\n"
        for i, w in enumerate("one two cat")
    )
    for name in ("train", "dev"):
        (tmp_path / f"{name}.conllu").write_text((rows + "\n") * 8, encoding="utf-8")
    files = ["--train", str(tmp_path / "train.conllu"), "--dev", str(tmp_path / "dev.conllu")]
    args = ["train", "tag", *files, "--init", str(mlm), "--out", str(tmp_path / "lora"), "--max-steps", "3"]
    assert main([*args, "--lora", "2", "--lora-targets", "v_proj,linear2", "--quiet"]) == 0
    adapter = load_file(tmp_path / "lora" / "adapter.safetensors")
    assert {k for k in adapter if k.startswith("head.")} == {"head.linear.weight", "head.linear.bias"}
    assert {k.rsplit(".", 2)[-2] for k in adapter if ".lora_" in k} == {"v_proj", "linear2"}


def test_averaging_the_checkpoints_of_a_lora_run_averages_the_merged_models(gpt_base, tmp_path):
    text = write_lm_text(tmp_path / "new.txt", seed=1)
    run = tmp_path / "lora"
    assert main(lora_run(gpt_base, run, text, "--checkpoint-every", "2")) == 0
    chosen = newest_checkpoints(run, 2)
    scale = 16.0 / 4
    merged = [merged_state(load_file(path / "model.safetensors"), scale) for path in chosen]
    assert main(["average", str(run), "--last", "2"]) == 0
    averaged = load_file(run / "model.safetensors")
    assert averaged.keys() == load_file(gpt_base / "model.safetensors").keys()
    for key, tensor in averaged.items():
        torch.testing.assert_close(tensor, (merged[0][key] + merged[1][key]) / 2)
    assert LanguageModel.load(run, torch.device("cpu")).model(torch.tensor([[3, 4]])).isfinite().all()


def test_peft_loads_the_adapters_of_a_translation_run_on_its_marian_export(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    src, tgt = write_reverse_task(tmp_path)
    assert main(tiny_args(src, tgt, tmp_path / "base")) == 0
    args = ["train", "translation", "--src", str(src), "--tgt", str(tgt), "--init", str(tmp_path / "base")]
    lora = ["--lora", "2", "--lora-targets", "q_proj,k_proj,v_proj,linear2", "--lr", "5e-2"]
    assert main([*args, "--out", str(tmp_path / "lora"), *lora, "--max-steps", "4", "--quiet"]) == 0
    assert main(["export-peft", str(tmp_path / "lora"), str(tmp_path / "adapter")]) == 0
    assert main(["export-hf", str(tmp_path / "base"), str(tmp_path / "hf")]) == 0
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text(encoding="utf-8"))
    assert config["task_type"] == "SEQ_2_SEQ_LM"
    assert any("encoder_attn.k_proj" in m for m in config["target_modules"])  # a fused kv_proj, cut
    hf = peft.PeftModel.from_pretrained(
        transformers.MarianMTModel.from_pretrained(tmp_path / "hf"), tmp_path / "adapter"
    ).eval()
    ours = Translator.load(tmp_path / "lora", torch.device("cpu")).model.eval()
    base = Translator.load(tmp_path / "base", torch.device("cpu")).model.eval()
    source, target = torch.randint(4, 12, (2, 7)), torch.randint(4, 12, (2, 5))
    with torch.no_grad():
        theirs = hf(input_ids=source, attention_mask=torch.ones_like(source), decoder_input_ids=target).logits
        mine = ours(source, target)[..., : theirs.shape[-1]]
        assert (mine - base(source, target)[..., : theirs.shape[-1]]).abs().max() > 1e-3
    torch.testing.assert_close(theirs, mine, atol=1e-4, rtol=1e-4)
