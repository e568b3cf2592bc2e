"""Llama runs in use: the tokenizers of Llama folders read as they are (Llama 3's byte-level BPE,
Llama 2's SentencePiece-style BPE with byte fallback), ``vaswani import-hf``, ``generate`` and
``export-hf`` through the CLI, a bad ``rope_scaling`` refused in one line, the ``llama-mini``
preset trained and exported, and few-shot prompting of an imported Llama run (needs the
``compare`` extra; skipped without it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from tests.hf import randomise
from tests.test_fewshot import SEED, WORDS, prompts, write_corpus
from vaswani.cli import main
from vaswani.config import ModelConfig, RunConfig, TrainConfig
from vaswani.data.config import TextData
from vaswani.errors import ConfigError, DataError
from vaswani.generation.config import DecodingConfig
from vaswani.interop import export_hf, import_hf
from vaswani.pipelines.lm import LanguageModel
from vaswani.tasks.lm import train_lm

transformers = pytest.importorskip("transformers")

TEXT = ["the cat sat on the mat", "a dog ran in the park", "the cat and the dog", "héllo wörld"] * 5
TEXTS = ["the cat", " héllo wörld", "naïve café 🙂🐍", "two\nlines\r\n\ttab", "日本語 ça va?"]
BOS3, EOS3 = "<|begin_of_text|>", "<|end_of_text|>"


def llama3_tokenizer() -> Tokenizer:
    """Llama 3's kind: byte-level BPE (trained here), its BOS and EOS, BOS put first by the
    post-processor."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=[BOS3, EOS3], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )  # fmt: skip
    tokenizer.train_from_iterator(TEXT, trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS3} $A", special_tokens=[(BOS3, tokenizer.token_to_id(BOS3))]
    )
    return tokenizer


def llama2_tokenizer() -> Tokenizer:
    """Llama 2's (and TinyLlama's) kind: <unk> 0, <s> 1, </s> 2, the 256 byte tokens <0x00>…<0xFF>,
    then BPE pieces over "▁"-joined words (trained here); Prepend/Replace normaliser, byte
    fallback, and the decoder that turns "▁" back into spaces and strips the first."""
    trained = Tokenizer(models.BPE())
    trained.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trained.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=120, show_progress=False))
    bpe = json.loads(trained.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    vocab.update({piece: 259 + i for i, piece in enumerate(bpe["vocab"])})
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in bpe["merges"]]
    tokenizer = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tokenizer.normalizer = trained.normalizer
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tokenizer.add_special_tokens(["<unk>", "<s>", "</s>"])
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tokenizer


def llama_folder(folder: Path, tokenizer: Tokenizer, bos: str, eos: str, **config: Any) -> Path:
    """A random-weight ``LlamaForCausalLM`` (grouped-query, 2 layers) saved with ``tokenizer``."""
    hf_config = transformers.LlamaConfig(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
        num_hidden_layers=2, vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=64,
        bos_token_id=tokenizer.token_to_id(bos), eos_token_id=tokenizer.token_to_id(eos), **config,
    )  # fmt: skip
    torch.manual_seed(0)
    randomise(transformers.LlamaForCausalLM(hf_config), "norm").save_pretrained(folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


@pytest.mark.parametrize("kind", ["llama3-byte-level", "llama2-byte-fallback"])
def test_tokenizer_json_is_read_as_it_is_and_round_trips(tmp_path, kind):
    tokenizer, bos, eos = (
        (llama3_tokenizer(), BOS3, EOS3) if kind.startswith("llama3") else (llama2_tokenizer(), "<s>", "</s>")
    )
    src = llama_folder(tmp_path / "hf", tokenizer, bos, eos)
    lm = LanguageModel.load(import_hf(src, tmp_path / "run"))
    assert (lm.tokenizer.bos_id, lm.tokenizer.eos_id) == (
        tokenizer.token_to_id(bos),
        tokenizer.token_to_id(eos),
    )
    theirs = transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(tokenizer.to_str()))
    for text in TEXTS:
        ids = lm.tokenizer.encode(text)
        assert ids == theirs(text)["input_ids"]  # BOS first, as the folder's tokenizer puts it
        assert lm.tokenizer.decode(ids) == text
    if kind.startswith("llama2"):  # characters never seen in training fall back to their bytes
        assert tokenizer.token_to_id("<0xF0>") in lm.tokenizer.encode("🙂")
    again = transformers.AutoTokenizer.from_pretrained(export_hf(tmp_path / "run", tmp_path / "out"))
    assert [again(t)["input_ids"] for t in TEXTS] == lm.tokenizer.encode_batch(TEXTS)
    assert (again.bos_token, again.eos_token) == (bos, eos)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"]) == (lm.tokenizer.bos_id, lm.tokenizer.eos_id)


def test_cli_imports_generates_and_exports(tmp_path, capsys):
    src = llama_folder(tmp_path / "hf", llama3_tokenizer(), BOS3, EOS3)
    run, out = tmp_path / "run", tmp_path / "out"
    assert main(["import-hf", str(src), str(run)]) == 0
    assert main(["generate", str(run), "the cat", "--max-new-tokens", "6", "--temperature", "0"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == f"wrote run directory {run} (from {src})"
    assert printed[1].startswith("the cat")
    continuation = LanguageModel.load(run).generate(
        ["the cat"], DecodingConfig(max_new_tokens=6, temperature=0)
    )
    assert printed[1] == "the cat" + continuation[0]
    assert main(["export-hf", str(run), str(out)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote Hugging Face model folder {out} (from {run})"
    hf = transformers.LlamaForCausalLM.from_pretrained(out).eval()
    prompt = torch.tensor([LanguageModel.load(run).tokenizer.encode("the cat")])
    eos = hf.config.eos_token_id
    theirs = hf.generate(
        prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6, do_sample=False, pad_token_id=eos,
        eos_token_id=eos,
    )  # fmt: skip
    assert LanguageModel.load(run).tokenizer.decode(theirs[0, prompt.shape[1] :].tolist()) == continuation[0]


@pytest.mark.parametrize("kind", ["linear", "llama3"])
def test_cli_refuses_a_bad_rope_scaling_in_one_line(tmp_path, capsys, kind):
    src = llama_folder(tmp_path / "hf", llama3_tokenizer(), BOS3, EOS3)
    path = src / "config.json"
    config = json.loads(path.read_text())
    config.pop("rope_parameters", None)
    path.write_text(
        json.dumps({**config, "rope_theta": 10000.0, "rope_scaling": {"rope_type": kind, "factor": 8.0}})
    )
    capsys.readouterr()
    assert main(["import-hf", str(src), str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vaswani: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert "rope_scaling" in err and f"'{kind}'" in err
    assert not (tmp_path / "run").exists()


def test_bad_llama_folders_are_refused_in_one_line(tmp_path):
    src = llama_folder(tmp_path / "hf", llama3_tokenizer(), BOS3, EOS3)
    path = src / "config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "eos_token_id": 100000}))
    with pytest.raises(
        ConfigError, match=r"'eos_token_id': must be a token id in \[0, vocab_size=\d+\), got 100000"
    ):
        import_hf(src, tmp_path / "run1")
    path.write_text(json.dumps({**config, "vocab_size": 100001, "eos_token_id": 100000}))
    with pytest.raises(DataError, match="'eos_token_id': id 100000 is not a token"):
        import_hf(src, tmp_path / "run1")
    path.write_text(json.dumps({**config, "eos_token_id": None}))
    with pytest.raises(ConfigError, match="'eos_token_id'"):
        import_hf(src, tmp_path / "run2")
    (src / "tokenizer.json").unlink()
    with pytest.raises(DataError, match=r"no tokenizer\.json"):
        import_hf(src, tmp_path / "run3")


@pytest.mark.slow  # trains on the embedded default text
def test_llama_mini_trains_generates_and_exports_to_transformers(tmp_path, capsys):
    run, out = tmp_path / "run", tmp_path / "out"
    args = [
        "train",
        "lm",
        "--preset",
        "llama-mini",
        "--out",
        str(run),
        "--max-steps",
        "3",
        "--batch-tokens",
        "512",
    ]
    assert (
        main(
            [
                *args,
                "--vocab-size",
                "512",
                "--eval-every",
                "1000",
                "--eval-sentences",
                "2",
                "--quiet",
                "--no-bf16",
            ]
        )
        == 0
    )
    assert main(["generate", str(run), "The ", "--max-new-tokens", "5", "--temperature", "0"]) == 0
    lm = LanguageModel.load(run)
    assert lm.model.config == ModelConfig.preset("llama-mini", tgt_vocab_size=lm.model.config.vocab_size)
    hf = transformers.LlamaForCausalLM.from_pretrained(export_hf(run, out)).eval()
    tokens = torch.tensor([lm.tokenizer.encode("def main():\n    return 0")])
    with torch.no_grad():
        assert (lm.model(tokens) - hf(tokens).logits).abs().max() < 1e-4
    assert (hf.config.num_attention_heads, hf.config.num_key_value_heads) == (8, 2)


@pytest.mark.slow  # trains a model for 15-25 s
def test_few_shot_prompting_works_on_an_imported_llama_run(tmp_path, capsys):
    """test_fewshot's task (three examples of translation into French or German, then a query) on
    a Llama-style GPT, exported and imported again: the imported run answers as the original, as
    transformers' greedy generate does, and right for at least 80% of the 24 prompts."""
    training_text = write_corpus(tmp_path / "docs")
    model = ModelConfig.preset(
        "llama-mini", tgt_vocab_size=64, d_model=64, n_heads=4, n_kv_heads=2, d_ff=160, n_decoder_layers=2,
        max_len=64, tie_embeddings="none",
    )  # fmt: skip
    train = TrainConfig(
        batch_tokens=2048, max_steps=500, lr=5e-3, min_lr=5e-4, warmup_steps=20, schedule="cosine",
        optimizer="adamw", betas=(0.9, 0.99), label_smoothing=0.0, eval_every=10**6, eval_sentences=20,
        seed=SEED,
    )  # fmt: skip
    data = TextData(source="text", text=(str(tmp_path / "docs"),), tokenizer="char", valid_fraction=0.05)
    _, original, _ = train_lm(RunConfig("lm", model, train, data), tmp_path / "run", quiet=True)
    hf_dir = export_hf(tmp_path / "run", tmp_path / "hf")
    imported = LanguageModel.load(import_hf(hf_dir, tmp_path / "imported"))
    cases = prompts(training_text)
    greedy = DecodingConfig(max_new_tokens=12, temperature=0, stop=("\n",))
    completions = imported.generate([p for _, p, _ in cases], greedy)
    assert completions == original.generate([p for _, p, _ in cases], greedy)
    right = sum(c == answer for (_, _, answer), c in zip(cases, completions, strict=True))
    assert right >= 0.8 * 2 * len(WORDS), completions
    hf = transformers.LlamaForCausalLM.from_pretrained(hf_dir).eval()
    _, prompt, _ = cases[3]
    ids = torch.tensor([imported.tokenizer.encode(prompt)])
    mask = torch.ones_like(ids)  # given: <|endoftext|> (0) is also the pad id, and never in a prompt here
    theirs = hf.generate(
        ids, attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0, eos_token_id=0
    )[0, ids.shape[1] :]
    assert imported.tokenizer.decode(theirs.tolist()).split("\n")[0] == completions[3]
    (tmp_path / "prompt.txt").write_text(prompt + "\n", encoding="utf-8")
    capsys.readouterr()
    args = [
        "generate",
        str(tmp_path / "imported"),
        "--prompt-file",
        str(tmp_path / "prompt.txt"),
        "--temperature",
        "0",
    ]
    assert main([*args, "--stop", "\n", "--max-new-tokens", "12"]) == 0
    assert capsys.readouterr().out == prompt + completions[3] + "\n"
