"""Marian (OPUS-MT) folders both ways: the weights (through the key table of
:mod:`vaswani.interop.marian`), the tokenizers, ``import-hf`` into a translation run and
``export-hf`` of one (the config conversion is :mod:`vaswani.interop.marian`'s).

Token ids: Marian's vocabulary has ``</s>`` (end), ``<unk>`` and ``<pad>`` (usually the last id),
which also starts the decoder (``decoder_start_token_id``), and is never generated (the
``bad_words_ids`` of Marian's generation config). The run's tokenizers carry these roles (see
:class:`~vaswani.tokenizer.TextTokenizer`); the ids in ``config.json`` must agree with them.
A folder without ``tokenizer.json`` is read from OPUS-MT's ``source.spm``, ``target.spm`` and
``vocab.json``, tokenized as ``MarianTokenizer`` does (:mod:`vaswani.interop.sentencepiece`).
A folder's OPUS-MT files (also beside a ``tokenizer.json``, as :func:`export_run` writes them)
are kept in the run directory (``sentencepiece/``) and written back on export, so that
``MarianTokenizer`` and ``AutoTokenizer`` read both sides of the exported folder.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from torch import Tensor

from vaswani.config import ModelConfig, RunConfig
from vaswani.data.config import ParallelData
from vaswani.errors import ConfigError, DataError, RunDirError
from vaswani.interop import fields
from vaswani.interop.common import (
    KeyMap,
    expand,
    fits_vocabulary,
    naming,
    read_hf_weights,
    rename,
    save_run,
    write_json,
    write_safetensors,
)
from vaswani.interop.marian import (
    CONFIG_TABLE,
    DECODER_EMBED,
    DECODER_TABLE,
    ENCODER_EMBED,
    ENCODER_TABLE,
    GENERATION_CONFIG,
    HEAD,
    HF_TARGET_TOKENIZER,
    HF_TOKENIZER,
    LOGITS_BIAS,
    POSITION_TABLES,
    SENTENCEPIECE_DIR,
    SHARED,
    TOKEN_IDS,
    check_expressible,
    config_from_hf,
    config_to_hf,
)
from vaswani.interop.sentencepiece import (
    SOURCE_SPM,
    TARGET_SPM,
    TARGET_VOCAB,
    VOCAB,
    copy_opus_files,
    marian_tokenizer,
    opus_files,
)
from vaswani.io import first_line, load_weights, write_file
from vaswani.layers.positions import halves_order, sinusoidal_table
from vaswani.models.transformer import Transformer
from vaswani.pipelines.translation import SRC_TOKENIZER, TASK, TGT_TOKENIZER
from vaswani.rundir import RunDir
from vaswani.tasks import registry
from vaswani.tokenizer import TextTokenizer
from vaswani.training.selection import chosen_weights


def _rows(cfg: ModelConfig) -> list[KeyMap]:
    if cfg.tie_embeddings == "all":
        embeddings = [SHARED]
    elif cfg.tie_embeddings == "output":
        embeddings = [ENCODER_EMBED, DECODER_EMBED]
    else:
        embeddings = [ENCODER_EMBED, DECODER_EMBED, HEAD]
    return [
        *embeddings,
        LOGITS_BIAS,
        *expand(ENCODER_TABLE, cfg.n_encoder_layers),
        *expand(DECODER_TABLE, cfg.n_decoder_layers),
    ]


def _our_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The shape of each of our tensors for ``cfg`` as Marian holds it: separate q/k/v and the
    output bias (on the meta device: no memory)."""
    with torch.device("meta"):
        model = Transformer(cfg.replace(fused_qkv=False, output_bias=True))
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def _check_position_table(name: str, tensor: Tensor, cfg: ModelConfig) -> None:
    """A stored position table must be the one we compute (Marian's), or the model would differ."""
    expected = sinusoidal_table(cfg.max_len, cfg.d_model, halves=True)
    if tuple(tensor.shape) != tuple(expected.shape):
        raise DataError(
            f"tensor '{name}' has shape {list(tensor.shape)}, the config expects {list(expected.shape)}"
        )
    atol = max(1e-4, 2 * torch.finfo(tensor.dtype).eps)  # a half-precision checkpoint rounds it
    if not torch.allclose(tensor.float(), expected, atol=atol):
        raise DataError(
            f"tensor '{name}' is not Marian's sinusoidal table; learned positions are not supported"
        )


def state_from_hf(tensors: Mapping[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """Our state dict (for ``Transformer(cfg).load_state_dict(..., strict=True)``) of Marian
    tensors: ``cfg`` is :func:`config_from_hf`'s. A missing, unexpected or misshapen tensor is a
    :class:`DataError` naming it; tied copies are read once, position tables checked. A missing
    ``final_logits_bias`` is zero, as ``MarianMTModel`` makes it."""
    check_expressible(cfg)
    for name, value in {"position": "sinusoidal_halves", "fused_qkv": False, "output_bias": True}.items():
        if getattr(cfg, name) != value:
            raise ConfigError(
                f"config field 'model.{name}': Marian weights load into {json.dumps(value)}, "
                f"got {json.dumps(getattr(cfg, name))}"
            )
    tied = {HEAD.hf} if cfg.tie_embeddings != "none" else set()
    if cfg.tie_embeddings == "all":
        tied |= {ENCODER_EMBED.hf, DECODER_EMBED.hf}
    named: dict[str, Tensor] = {}
    for name, tensor in tensors.items():
        if name in POSITION_TABLES:
            _check_position_table(name, tensor, cfg)
        elif name not in tied:
            named[name] = tensor
    bias = named.get(LOGITS_BIAS.hf, torch.zeros(1, cfg.tgt_vocab_size))
    named[LOGITS_BIAS.hf] = bias.flatten() if bias.dim() == 2 and bias.shape[0] == 1 else bias
    state = rename(named, _rows(cfg), to_ours=True, our_shapes=_our_shapes(cfg))
    if cfg.tie_embeddings == "all":
        state["tgt_embed.token.weight"] = state[SHARED.ours]
    if cfg.tie_embeddings != "none":
        state[HEAD.ours] = state["tgt_embed.token.weight"]
    return state


def _split_fused(state: Mapping[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """Fused ``qkv_proj`` (self-attention) and ``kv_proj`` (cross-attention) split into Marian's
    separate projections."""
    split = dict(state)
    for stack, n_layers in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        for i in range(n_layers):
            for attn, fused, parts in (("self_attn", "qkv", "qkv"), ("cross_attn", "kv", "kv")):
                prefix = f"{stack}.layers.{i}.{attn}."
                for kind in ("weight", "bias"):
                    name = f"{prefix}{fused}_proj.{kind}"
                    if name in split:
                        chunks = split.pop(name).chunk(len(parts))
                        split.update(
                            {f"{prefix}{p}_proj.{kind}": c for p, c in zip(parts, chunks, strict=True)}
                        )
    return split


def _to_halves(state: Mapping[str, Tensor], d_model: int) -> dict[str, Tensor]:
    """The same model with the interleaved sinusoidal table turned into the halves one: every
    model-dimension axis (the residual stream's) permuted by :func:`halves_order`. LayerNorm,
    attention and the feed-forward network commute with such a permutation, so the logits are
    unchanged."""
    order = halves_order(d_model)
    permuted: dict[str, Tensor] = {}
    for name, tensor in state.items():
        if name.endswith(("norm.weight", "norm.bias", "out_proj.bias", "linear2.bias")):
            tensor = tensor[order]  # a vector over the model dimension
        elif name.endswith(("out_proj.weight", "linear2.weight")):
            tensor = tensor[order, :]  # writes into the residual stream
        elif name.endswith(("token.weight", "output.weight", "_proj.weight", "linear1.weight")):
            tensor = tensor[:, order]  # reads the residual stream (or embeds into it)
        permuted[name] = tensor
    return permuted


def state_to_hf(state: Mapping[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """Marian tensors (``MarianMTModel`` names, contiguous, unshared, safetensors-ready) of our
    state dict: fused projections are split, interleaved positions permuted to halves (see the
    module docstring), a missing output bias written as zeros; tied copies are left out, as
    ``save_pretrained`` does."""
    check_expressible(cfg)
    state = _split_fused(state, cfg) if cfg.fused_qkv else dict(state)
    if cfg.position == "sinusoidal":
        state = _to_halves(state, cfg.d_model)
    if cfg.tie_embeddings == "all":
        state.pop("tgt_embed.token.weight", None)
    if cfg.tie_embeddings != "none":
        state.pop(HEAD.ours, None)
    state.setdefault(LOGITS_BIAS.ours, torch.zeros(cfg.tgt_vocab_size))
    hf = rename(state, _rows(cfg), to_ours=False, our_shapes=_our_shapes(cfg))
    hf[LOGITS_BIAS.hf] = hf[LOGITS_BIAS.hf][None].contiguous()
    return hf


def check_token_ids(hf: Mapping[str, Any], src_tok: TextTokenizer, tgt_tok: TextTokenizer) -> None:
    """Refuse, naming the field, token ids of a Marian ``config.json`` that the run's tokenizers
    do not agree with: decoding starts from ``tgt_tok.bos_id`` and stops at ``tgt_tok.eos_id``,
    and both tokenizers pad with the model's pad id."""
    expected = {
        "pad_token_id": (tgt_tok.pad_id, "the target tokenizer's padding"),
        "eos_token_id": (tgt_tok.eos_id, "the target tokenizer's end of sentence"),
        "decoder_start_token_id": (tgt_tok.bos_id, "the target tokenizer's start of decoding"),
    }
    for name, (token_id, role) in expected.items():
        found = fields.of_kind(name, hf.get(name, TOKEN_IDS[name]), int)
        if found != token_id:
            raise ConfigError(f"field '{name}': {found}, but {role} is {token_id}")
    if src_tok.pad_id != tgt_tok.pad_id:
        raise ConfigError(
            f"field 'pad_token_id': the source tokenizer pads with {src_tok.pad_id}, the target one "
            f"with {tgt_tok.pad_id}"
        )


def _text_tokenizer(tokenizer: Tokenizer, path: Path) -> TextTokenizer:
    """``tokenizer`` (read from ``path``) with its special tokens' roles, unpadded and untruncated."""
    tokenizer.no_truncation()
    tokenizer.no_padding()
    try:
        return TextTokenizer(tokenizer)
    except RunDirError as exc:  # neither vaswani's nor Marian's special tokens
        raise DataError(f"{path}: {exc}") from None


def _load_tokenizer(path: Path) -> TextTokenizer:
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on a bad file
        raise DataError(f"{path}: not a readable tokenizer ({first_line(exc)})") from None
    return _text_tokenizer(tokenizer, path)


def _sentencepiece_tokenizers(src: Path) -> tuple[TextTokenizer, TextTokenizer, Path]:
    """The tokenizers of OPUS-MT's own files, as ``MarianTokenizer`` reads them: ``source.spm``
    (and ``target.spm`` for the target side, when there is one) with the ids of ``vocab.json``
    (and ``target_vocab.json`` for a separate target vocabulary, when there is one)."""
    files = opus_files(src)
    if not files:
        raise DataError(f"{src}: {SOURCE_SPM} without {VOCAB}, which gives its pieces their ids")
    vocab, target_vocab = files[VOCAB], files.get(TARGET_VOCAB, files[VOCAB])
    src_tok = _text_tokenizer(marian_tokenizer(files[SOURCE_SPM], vocab, source=True), vocab)
    tgt_tok = _text_tokenizer(marian_tokenizer(files[TARGET_SPM], target_vocab, source=False), target_vocab)
    return src_tok, tgt_tok, vocab


def read_tokenizers(src: Path) -> tuple[TextTokenizer, TextTokenizer, Path]:
    """The source and target tokenizers of a Marian folder and the file they came from:
    ``tokenizer.json`` (both sides, or the source side when a ``target_tokenizer.json`` is
    there too), as :func:`export_run` writes them, or else OPUS-MT's SentencePiece files (see
    :mod:`vaswani.interop.sentencepiece`)."""
    path = src / HF_TOKENIZER
    if not path.is_file():
        if (src / SOURCE_SPM).is_file():
            return _sentencepiece_tokenizers(src)
        raise DataError(f"{src}: no {HF_TOKENIZER}, nor {SOURCE_SPM} with {VOCAB}; a run directory needs one")
    src_tok = _load_tokenizer(path)
    target = src / HF_TARGET_TOKENIZER
    tgt_tok = _load_tokenizer(target) if target.is_file() else src_tok
    return src_tok, tgt_tok, path


def import_folder(src: Path, hf_config: Mapping[str, Any], out: Path) -> None:
    """Write a vaswani ``translation`` run directory into ``out`` from the Marian folder ``src``."""
    with naming(src / RunDir.CONFIG, ConfigError):
        cfg = fields.fitting(config_from_hf(hf_config), CONFIG_TABLE)
    src_tok, tgt_tok, tokenizer_path = read_tokenizers(src)
    fits_vocabulary(tokenizer_path, src_tok.vocab_size, "vocab_size", cfg.src_vocab_size)
    fits_vocabulary(tokenizer_path, tgt_tok.vocab_size, "decoder_vocab_size", cfg.tgt_vocab_size)
    with naming(src / RunDir.CONFIG, ConfigError):
        check_token_ids(hf_config, src_tok, tgt_tok)
    tensors, weights_path = read_hf_weights(src)
    with naming(weights_path, DataError):
        state = state_from_hf(tensors, cfg)
    data = ParallelData(
        source="default", vocab_size=tgt_tok.vocab_size, shared_vocab=cfg.tie_embeddings == "all"
    )
    run = RunConfig(TASK, cfg, registry.configure(TASK).train, data)  # the default recipe's
    save_run(out, run, Transformer(cfg), state)
    for tokenizer, name in ((src_tok, SRC_TOKENIZER), (tgt_tok, TGT_TOKENIZER)):
        write_file(out / name, tokenizer.tokenizer.to_str(pretty=True).encode("utf-8"))
    copy_opus_files(src, out / SENTENCEPIECE_DIR)


def _special_tokens(tok: TextTokenizer) -> dict[str, str]:
    """``tokenizer_config.json``'s names of the special tokens of ``tok``."""
    names = {"eos_token": tok.eos_id, "unk_token": tok.unk_id, "pad_token": tok.pad_id}
    if tok.bos_id != tok.pad_id:
        names["bos_token"] = tok.bos_id
    return {role: str(tok.tokenizer.id_to_token(token_id)) for role, token_id in names.items()}


def export_run(run_dir: Path, run: RunConfig, out: Path) -> None:
    """Write a ``MarianMTModel`` folder into ``out`` from the ``translation`` run ``run_dir``:
    ``config.json``, ``generation_config.json`` (vaswani's decoding: greedy, nothing forced,
    Marian's pad never generated), ``model.safetensors`` (the weights the run translates with:
    :func:`~vaswani.training.selection.chosen_weights`), and the tokenizers as ``tokenizer.json``
    (the source side; ``target_tokenizer.json`` beside it when the target's differs, which
    ``vaswani import-hf`` reads back) with a ``tokenizer_config.json``.

    A run imported from OPUS-MT's SentencePiece files gets them back (``source.spm``,
    ``target.spm``, ``vocab.json``, ``target_vocab.json``), and its ``tokenizer_config.json``
    names ``MarianTokenizer``: ``AutoTokenizer`` and ``MarianTokenizer`` then tokenize sources and
    targets (``text_target=``) as the original folder does. Any other run's ``tokenizer.json``
    loads as a ``PreTrainedTokenizerFast``, whose ``text_target`` uses the source side, which
    only shared vocabularies get right."""
    src_tok = TextTokenizer.load(run_dir / SRC_TOKENIZER)
    tgt_tok = TextTokenizer.load(run_dir / TGT_TOKENIZER)
    with naming(run_dir / RunDir.CONFIG, ConfigError):
        hf_config = config_to_hf(run.model, tgt_tok)
    model = Transformer(run.model)
    # the weights `vaswani translate` and `evaluate` use: the best by train.select_by where kept
    load_weights(model, chosen_weights(RunDir(run_dir), run.train.select_by)[0])
    write_json(out / RunDir.CONFIG, hf_config)
    generation: dict[str, Any] = {
        "decoder_start_token_id": tgt_tok.bos_id,
        "eos_token_id": tgt_tok.eos_id,
        "pad_token_id": run.model.pad_id,
        "forced_eos_token_id": None,
        "max_length": run.model.max_len,
    }
    if tgt_tok.suppressed_ids:
        generation["bad_words_ids"] = [[token_id] for token_id in tgt_tok.suppressed_ids]
    write_json(out / GENERATION_CONFIG, generation)
    write_safetensors(out / RunDir.WEIGHTS, state_to_hf(model.state_dict(), run.model))
    source_json = src_tok.tokenizer.to_str(pretty=True)
    target_json = tgt_tok.tokenizer.to_str(pretty=True)
    write_file(out / HF_TOKENIZER, source_json.encode("utf-8"))
    if target_json != source_json:
        write_file(out / HF_TARGET_TOKENIZER, target_json.encode("utf-8"))
    tokenizer_config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast"}
    if copy_opus_files(run_dir / SENTENCEPIECE_DIR, out):
        separate = (out / TARGET_VOCAB).is_file()
        tokenizer_config = {"tokenizer_class": "MarianTokenizer", "separate_vocabs": separate}
    write_json(
        out / "tokenizer_config.json",
        {**tokenizer_config, **_special_tokens(src_tok), "model_max_length": run.model.max_len},
    )


def unread_target_side(folder: Path) -> str | None:
    """A note naming what Hugging Face will not read in the exported ``folder``, or None: a
    separate target vocabulary without OPUS-MT's SentencePiece files is kept in
    ``target_tokenizer.json``, which ``AutoTokenizer`` ignores (its ``decode`` and ``text_target``
    use the source side); ``MarianTokenizer``'s separate vocabularies need SentencePiece models,
    which a BPE run has none of."""
    if not (folder / HF_TARGET_TOKENIZER).is_file() or (folder / SOURCE_SPM).is_file():
        return None
    return (
        f"note: AutoTokenizer reads only {HF_TOKENIZER} (the source side); decode target ids with "
        f"{HF_TARGET_TOKENIZER} (tokenizers.Tokenizer.from_file)"
    )
