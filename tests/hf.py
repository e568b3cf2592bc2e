"""Hugging Face parity helpers: ``transformers`` models with every weight random, the folders they
are saved in, greedy decoding against ``generate()``, and Marian's shapes, special ids and models
(shared by test_interop_marian.py and test_interop_marian_spm.py). Importing this module skips the
importing test module when ``transformers`` is not installed."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from torch import nn

from tests.helpers import perturb, write_run_dir
from vaswani.config import ModelConfig, RunConfig, TrainConfig
from vaswani.data.config import TextData
from vaswani.generation.lm import lm_next_logits
from vaswani.generation.sampling import generate
from vaswani.models.gpt import GPT
from vaswani.tokenizer import LMTokenizer, WordPieceTokenizer

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

M = TypeVar("M", bound=nn.Module)


def randomise(model: M, norm: str, bias_scale: float = 0.3, keep: str | None = None) -> M:
    """``model`` with every weight drawn afresh, so that a weight copied to the wrong place shows: the
    norms' (parameter names holding ``norm``) gains ~ N(1, 0.1²) and biases ~ N(0, 0.1²), the other
    biases ~ N(0, bias_scale²), the other weights ~ N(0, 0.3²); a name holding ``keep`` is left alone."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if keep is not None and keep in name:
                continue
            if norm in name:  # gains near 1, biases near 0
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if name.endswith("weight") else 0.0))
            else:
                p.copy_(torch.randn_like(p) * (bias_scale if name.endswith("bias") else 0.3))
    return model


def hf_folder(folder: Path, model: Any, tokenizer: WordPieceTokenizer | LMTokenizer) -> Path:
    """``model`` saved as a Hugging Face folder with ``tokenizer`` as its ``tokenizer.json``."""
    model.save_pretrained(folder)
    tokenizer.save(folder / "tokenizer.json")
    return folder


# ---------------------------------------------------------------------------------------------
# Marian


# Three shapes: a shared vocabulary with SiLU ("swish", OPUS-MT's) and scaled embeddings, separate
# vocabularies with a tied head and GELU, and separate untied ones; deeper decoders and encoders.
MARIAN_CONFIGS: list[dict[str, Any]] = [
    {
        "d_model": 32, "encoder_layers": 1, "decoder_layers": 2, "encoder_attention_heads": 2,
        "decoder_attention_heads": 2, "encoder_ffn_dim": 48, "decoder_ffn_dim": 48, "vocab_size": 50,
        "activation_function": "swish", "scale_embedding": True,
    },
    {
        "d_model": 48, "encoder_layers": 2, "decoder_layers": 1, "encoder_attention_heads": 4,
        "decoder_attention_heads": 4, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "vocab_size": 80,
        "decoder_vocab_size": 70, "activation_function": "gelu", "share_encoder_decoder_embeddings": False,
    },
    {
        "d_model": 64, "encoder_layers": 3, "decoder_layers": 3, "encoder_attention_heads": 4,
        "decoder_attention_heads": 4, "encoder_ffn_dim": 96, "decoder_ffn_dim": 96, "vocab_size": 120,
        "decoder_vocab_size": 100, "activation_function": "swish", "scale_embedding": True,
        "share_encoder_decoder_embeddings": False, "tie_word_embeddings": False,
    },
]  # fmt: skip
MARIAN_EOS, MARIAN_UNK = 0, 1  # Marian's </s> and <unk>; <pad> is the last id of the target vocabulary


def assert_greedy_equals_generate(model: nn.Module, hf: Any, vocab: int, eos: int, pad: int) -> None:
    """Our greedy decoding of the decoder-only ``model`` gives the same 50 new tokens as the
    Hugging Face model ``hf``'s ``generate()``, from one prompt and from a left-padded batch of two
    (position ids from the attention mask); ``eos`` should be an id the model never produces
    first, so that all 50 steps are compared."""
    prompts = torch.randint(1, vocab - 1, (2, 9), generator=torch.Generator().manual_seed(4))
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, :4] = False
    prompts[1, :4] = pad
    for ids, attention in ((prompts[:1], mask[:1]), (prompts, mask)):
        ours = generate(lm_next_logits(model, attention), ids, 50, eos, pad).tokens
        theirs = hf.generate(
            ids, attention_mask=attention.long(), max_new_tokens=50, do_sample=False, pad_token_id=pad,
            eos_token_id=eos,
        )[:, ids.shape[1] :]  # fmt: skip
        assert theirs.shape == (ids.shape[0], 50)
        assert torch.equal(ours, theirs)


def write_lm_run(run_dir: Path, cfg: ModelConfig, tokenizer: LMTokenizer, seed: int) -> GPT:
    """A vaswani lm run directory holding a GPT with random weights (biases and norm gains too)."""
    torch.manual_seed(seed)
    model = perturb(GPT(cfg).eval(), 0.1)
    run = RunConfig("lm", cfg, TrainConfig(), TextData(source="default"))
    write_run_dir(run_dir, run, model, {"tokenizer.json": tokenizer})
    return model


def marian_pad(config: dict[str, Any]) -> int:
    """The id of <pad>: the last of the target vocabulary."""
    return config.get("decoder_vocab_size", config["vocab_size"]) - 1


def marian_tokenizer(vocab_size: int, pad: int, source: bool) -> Tokenizer:
    """A word-level tokenizer with Marian's special ids (</s> 0, <unk> 1, <pad> ``pad``) and the
    words w2, w3, … at the other ids; the source side appends </s>, as MarianTokenizer does."""
    vocab = {f"w{i}": i for i in range(vocab_size)}
    vocab.update({"</s>": MARIAN_EOS, "<unk>": MARIAN_UNK, "<pad>": pad})
    del vocab[f"w{pad}"], vocab["w0"], vocab["w1"]
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(["</s>", "<unk>", "<pad>"])
    if source:
        tokenizer.post_processor = processors.TemplateProcessing(
            single="$A </s>", special_tokens=[("</s>", MARIAN_EOS)]
        )
    return tokenizer


def marian_model(seed: int, **config: Any) -> Any:
    """A ``MarianMTModel`` with every weight random (biases, LayerNorms and final_logits_bias too;
    the fixed position tables are kept), in eval mode.

    Random models repeat one token with a wide margin, so </s> and <pad> are pushed up by their
    distance to the best token at the 0.3 and 0.7 quantiles: hypotheses end at many lengths, and
    <pad> would often win if it were not suppressed.
    """
    pad = marian_pad(config)
    torch.manual_seed(seed)
    hf_config = transformers.MarianConfig(
        max_position_embeddings=64, pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=MARIAN_EOS,
        forced_eos_token_id=None, **config,
    )  # fmt: skip
    model = randomise(transformers.MarianMTModel(hf_config).eval(), "layer_norm", 0.1, keep="embed_positions")
    with torch.no_grad():
        model.final_logits_bias.copy_(torch.randn_like(model.final_logits_bias) * 0.05)
        src, _ = marian_sources(config, seed=seed + 100)
        logits = model(input_ids=src, decoder_input_ids=src.clamp(max=pad - 1)).logits
        best = logits.max(dim=-1).values
        for token, quantile in ((MARIAN_EOS, 0.3), (pad, 0.7)):
            model.final_logits_bias[0, token] += (best - logits[..., token]).quantile(quantile)
    return model


def marian_folder(folder: Path, model: Any, config: dict[str, Any]) -> Path:
    """``model`` saved with tokenizers of Marian's special ids (a target one for separate vocabularies)."""
    model.save_pretrained(folder)
    pad = marian_pad(config)
    marian_tokenizer(config["vocab_size"], pad, source=True).save(str(folder / "tokenizer.json"))
    if "decoder_vocab_size" in config:
        marian_tokenizer(config["decoder_vocab_size"], pad, source=False).save(
            str(folder / "target_tokenizer.json")
        )
    return folder


def marian_sources(config: dict[str, Any], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Three source rows of lengths 9, 5 and 2 (each ending in </s>), right-padded, and their mask."""
    pad = marian_pad(config)
    src = torch.randint(2, pad, (3, 9), generator=torch.Generator().manual_seed(seed))
    for row, length in enumerate((9, 5, 2)):
        src[row, length - 1] = MARIAN_EOS
        src[row, length:] = pad
    return src, src != pad


def marian_generation_settings(config: dict[str, Any]) -> dict[str, Any]:
    """``generate`` settings that apply what vaswani applies (Marian's <pad> is never generated)
    and nothing else."""
    return {
        "bad_words_ids": [[marian_pad(config)]], "forced_eos_token_id": None, "no_repeat_ngram_size": 0,
        "repetition_penalty": 1.0, "min_length": 0, "do_sample": False,
    }  # fmt: skip
