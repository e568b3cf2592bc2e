"""The attention of a trained model on one input, as labelled maps: what ``vaswani attention``
draws (:func:`vaswani.plots.attention_figure`), the maps of each run kind in :data:`ATTENTION`.

A map holds one kind of attention (the decoder's cross-attention, a GPT's self-attention...) in
every layer and head, with readable token labels for its rows and columns.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders
from torch import Tensor

from vaswani.data.images import image_tensor, read_image
from vaswani.errors import ConfigError, DataError
from vaswani.generation.seq2seq import translate_ids
from vaswani.layers.masks import padding_mask
from vaswani.models.bert import Bert
from vaswani.models.gpt_classifier import GPTClassifier
from vaswani.pipelines.common import model_device
from vaswani.pipelines.image import ImageClassifier
from vaswani.pipelines.lm import LanguageModel
from vaswani.pipelines.translation import Translator
from vaswani.tokenizer import WordPieceTokenizer

VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}
LABEL_CHARS = 12  # longer token labels are cut with "…"
TRANSLATION_PARTS = ("encoder", "decoder-self", "cross")  # what --part chooses in a translation run
TRANSLATION_DEFAULT = ("cross", "decoder-self")


@dataclass(frozen=True)
class AttentionMap:
    """One kind of attention of a model (e.g. the decoder's cross-attention) in every layer and head.

    ``weights`` (layers, heads, queries, keys): each row is a softmax over the keys. ``queries``
    and ``keys`` label the rows and columns; ``query_axis`` and ``key_axis`` name them.
    """

    name: str
    weights: Tensor
    queries: list[str]
    keys: list[str]
    query_axis: str
    key_axis: str

    def __post_init__(self) -> None:
        if self.weights.dim() != 4:
            raise ValueError(f"{self.name}: weights must be (layers, heads, queries, keys)")
        if tuple(self.weights.shape[2:]) != (len(self.queries), len(self.keys)):
            raise ValueError(
                f"{self.name}: weights {tuple(self.weights.shape)} do not fit {len(self.queries)} query "
                f"and {len(self.keys)} key labels"
            )

    @property
    def n_layers(self) -> int:
        return self.weights.shape[0]

    @property
    def n_heads(self) -> int:
        return self.weights.shape[1]


# -- tokens as labels ---------------------------------------------------------------------------


@functools.cache
def _byte_of_symbol() -> dict[str, int]:
    """GPT-2's byte-level alphabet read backwards: the printable symbol standing for each byte."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]  # "!".."~", "¡".."¬", "®".."ÿ"
    others = [b for b in range(256) if b not in printable]
    symbols = printable + [256 + i for i in range(len(others))]
    return {chr(s): b for s, b in zip(symbols, printable + others, strict=True)}


def token_labels(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    """Readable labels of token ``ids``: the piece's text with a space shown as "␣" (the "▁" of a
    SentencePiece-style word start and the "Ġ" of byte-level BPE both become "␣"), a newline as
    "↵"; a byte-level piece that ends inside a UTF-8 character shows its loose bytes as ``\\xe4``.
    Special tokens (``<bos>``, ``<|endoftext|>``) are shown as they are, other long pieces cut short;
    an id past the vocabulary shows as ``#id``."""
    specials = {i for i, token in tokenizer.get_added_tokens_decoder().items() if token.special}
    byte_level = isinstance(tokenizer.decoder, decoders.ByteLevel)
    table = _byte_of_symbol()
    labels = []
    for i in ids:
        piece = tokenizer.id_to_token(i)
        if piece is None:  # an embedding row past the tokenizer's vocabulary
            labels.append(f"#{i}")
        elif i in specials:
            labels.append(piece)
        else:
            if byte_level:
                piece = bytes(table.get(c, ord("?")) for c in piece).decode("utf-8", "backslashreplace")
            piece = "".join(VISIBLE.get(c, c) for c in piece.replace("▁", " "))
            labels.append(piece if len(piece) <= LABEL_CHARS else piece[: LABEL_CHARS - 1] + "…")
    return labels


# -- attention of a model -----------------------------------------------------------------------


def _stack(weights: list[dict[str, Tensor]], kind: str) -> Tensor:
    """(layers, heads, queries, keys) of the first batch row of each layer's ``kind`` weights, on
    the CPU (to be drawn)."""
    return torch.stack([layer[kind][0] for layer in weights]).float().cpu()


def chosen_parts(part: str | None, known: Sequence[str], default: Sequence[str], kind: str) -> list[str]:
    """The parts named by ``--part`` (comma-separated, each one of ``known``), or ``default``."""
    if part is None:
        return list(default)
    chosen = [name.strip() for name in part.split(",")]
    for name in chosen:
        if name not in known:
            raise ConfigError(
                f"--part {part}: {kind} draws {' or '.join(known)} (comma-separated), not {name!r}"
            )
    return chosen


@torch.no_grad()
def translation_attention(
    translator: Translator, sentence: str, parts: Sequence[str] = TRANSLATION_DEFAULT
) -> tuple[list[AttentionMap], str]:
    """The attention of a translator while it translates ``sentence``, one map per part of
    :data:`TRANSLATION_PARTS` in ``parts`` (by default the decoder's cross- and self-attention),
    and the translation.

    The sentence is translated greedily (as :meth:`Translator.translate` does); the decoder then reads
    that translation teacher-forced and returns its weights. Row t is the query that predicts the
    t-th target token (so it is labelled with that token); the decoder input it reads is
    ``<bos>`` and the target tokens before it. The encoder's self-attention is source × source.
    The model runs on its own device.
    """
    model = translator.model
    device = model_device(model)
    model.eval()
    src_ids = _check_text(sentence, translator.src_tok.encode(sentence), model.config.max_len, "sentence")
    src = torch.tensor([src_ids], device=device)
    bos, eos = translator.tgt_tok.bos_id, translator.tgt_tok.eos_id
    suppress = translator.suppressed
    row = translate_ids(model, src, bos, eos, suppress=suppress).tokens[0].tolist()
    produced = row[: row.index(eos) + 1] if eos in row else row
    tgt_in = [bos, *produced[:-1]]
    _, weights = model.decode(torch.tensor([tgt_in], device=device), model.encode(src), need_weights=True)
    mask = padding_mask(src, model.config.pad_id)
    _, encoder_weights = model.encoder(model.src_embed(src), mask, need_weights=True)
    source = token_labels(translator.src_tok.tokenizer, src_ids)
    predicted = token_labels(translator.tgt_tok.tokenizer, produced)
    read = token_labels(translator.tgt_tok.tokenizer, tgt_in)
    maps = {
        "encoder": AttentionMap(
            "encoder self-attention", _stack(encoder_weights, "self"), source, source, "source", "source"
        ),
        "cross": AttentionMap(
            "cross-attention", _stack(weights, "cross"), predicted, source, "target", "source"
        ),
        "decoder-self": AttentionMap(
            "decoder self-attention", _stack(weights, "self"), predicted, read, "target", "decoder input"
        ),
    }
    return [maps[part] for part in parts], translator.tgt_tok.decode(produced)


@torch.no_grad()
def lm_attention(lm: LanguageModel, text: str) -> list[AttentionMap]:
    """The causal self-attention of a language model reading ``text`` (one map, token × token), on
    the model's device."""
    lm.model.eval()
    ids = _check_text(text, lm.tokenizer.encode(text), lm.model.config.max_len, "text")
    _, weights = lm.model.run(torch.tensor([ids], device=model_device(lm.model)), need_weights=True)
    labels = token_labels(lm.tokenizer.tokenizer, ids)
    return [AttentionMap("self-attention", _stack(weights, "self"), labels, labels, "query", "key")]


def _check_text(text: str, ids: list[int], max_len: int, what: str) -> list[int]:
    if not text.strip() or not ids:
        raise DataError(f"the {what} is empty")
    if len(ids) > max_len:
        raise DataError(f"the {what} has {len(ids)} tokens, more than the model's max_len={max_len}")
    return ids


@torch.no_grad()
def bert_attention(bert: Bert, tokenizer: WordPieceTokenizer, text: str) -> list[AttentionMap]:
    """The self-attention of a BERT encoder reading ``text`` as ``[CLS] text [SEP]`` (a sentence
    pair written ``A<TAB>B`` as ``[CLS] A [SEP] B [SEP]``, segments 0 then 1), cut to the model's
    max_len: one map, WordPiece token × token, [CLS] and [SEP] shown; on the model's device."""
    bert.eval()
    first, tab, second = text.partition("\t")
    if not first.strip() or (tab and not second.strip()):
        raise DataError("the text is empty")
    ids, segments = tokenizer.encode_segments(first, second if tab else None)
    device = model_device(bert)
    tokens, types = torch.tensor([ids], device=device), torch.tensor([segments], device=device)
    _, weights = bert.hidden(tokens, types if bert.embed.segment is not None else None, need_weights=True)
    labels = token_labels(tokenizer.tokenizer, ids)
    return [AttentionMap("self-attention", _stack(weights, "self"), labels, labels, "query", "key")]


def encoder_of(wrapper: Any) -> Bert:
    """The BERT encoder of a BERT run's wrapper (``SentenceEncoder``, ``MaskedLanguageModel``,
    ``TextClassifier``, ``Tagger``)."""
    return wrapper.model if isinstance(wrapper.model, Bert) else wrapper.model.bert


def titled_translation_attention(
    translator: Translator, sentence: str, part: str | None = None
) -> tuple[list[AttentionMap], str]:
    """:func:`translation_attention` of the ``--part`` chosen, with the title ``sentence → translation``
    (:data:`ATTENTION`)."""
    if translator.model.config.arch == "rnn":
        raise ConfigError(
            "vaswani attention reads a Transformer's attention layers; an RNN run (--arch rnn) has none"
        )
    parts = chosen_parts(part, TRANSLATION_PARTS, TRANSLATION_DEFAULT, "a translation run")
    maps, translation = translation_attention(translator, sentence, parts)
    return maps, f"{sentence} → {translation}"


def titled_lm_attention(
    lm: LanguageModel, text: str, part: str | None = None
) -> tuple[list[AttentionMap], str]:
    """:func:`lm_attention` with ``text`` as the title (:data:`ATTENTION`)."""
    chosen_parts(part, ("self",), ("self",), "a language model")
    return lm_attention(lm, text), text


def titled_bert_attention(wrapper: Any, text: str, part: str | None = None) -> tuple[list[AttentionMap], str]:
    """:func:`bert_attention` of any BERT run's wrapper, with ``text`` as the title (:data:`ATTENTION`);
    a GPT classifier's wrapper gives its GPT's causal self-attention (:func:`lm_attention`)."""
    chosen_parts(part, ("self",), ("self",), "a BERT run")
    if isinstance(getattr(wrapper, "model", None), GPTClassifier):
        return lm_attention(LanguageModel(wrapper.model.gpt, wrapper.tokenizer), text), text
    return bert_attention(encoder_of(wrapper), wrapper.tokenizer, text), text.replace("\t", " ‖ ")


# -- attention over an image --------------------------------------------------------------------

ROLLOUT = "attention rollout (Abnar & Zuidema 2020: heads averaged, the residual identity averaged in)"
LAST_LAYER = "attention of the last layer, its heads' mean and each head"
IMAGE_PARTS = ("rollout", "last")  # what --part chooses in an image run


@dataclass(frozen=True)
class ImageAttention:
    """Where a ViT's [CLS] token looks in one image: ``image`` (C, H, W) uint8 as the model reads it
    (resized), ``grid`` (rows, columns), the [CLS] row over the patches (of the rollout, or the
    last layer's heads' mean), and ``heads`` (heads, rows, columns), the last layer's [CLS] row
    of each head (None for the rollout)."""

    image: Tensor
    grid: Tensor
    heads: Tensor | None = None


def attention_rollout(weights: Sequence[Tensor]) -> Tensor:
    """Attention rollout (Abnar & Zuidema 2020) of one input's self-attention ``weights``, each
    layer's (heads, n, n), first layer first: Â_l = (mean over heads of A_l + I) / 2, its rows
    renormalised to sum to 1, and R = Â_L · … · Â_1 (n, n), float64; row i says how much each
    input token flows into token i at the top."""
    eye = torch.eye(weights[0].shape[-1], dtype=torch.float64)
    rollout = eye
    for layer in weights:
        mixed = 0.5 * layer.double().mean(dim=0) + 0.5 * eye
        rollout = (mixed / mixed.sum(dim=-1, keepdim=True)) @ rollout
    return rollout


@torch.no_grad()
def image_attention(
    classifier: ImageClassifier, path: str, part: str | None = None
) -> tuple[ImageAttention, str]:
    """The [CLS] token's attention over the patches of the image file ``path``: its rollout
    (``part`` "rollout", the default) or the last layer's per-head weights ("last"), and a title
    naming the predicted class and the method (:data:`ATTENTION`); on the model's device."""
    (chosen,) = chosen_parts(part, IMAGE_PARTS, ("rollout",), "an image run")
    model, processing = classifier.model, classifier.processing
    model.eval()
    image = image_tensor(processing.resize(read_image(path, processing.channels)))
    pixels = processing.normalize(image[None]).to(model_device(model))
    hidden, weights = model.hidden(pixels, need_weights=True)
    probs = model.head(model.pool(hidden)).float().softmax(dim=-1)[0].cpu()
    size = model.config.patch_size
    shape = (image.shape[1] // size, image.shape[2] // size)
    heads = None
    if chosen == "rollout":
        rollout = attention_rollout([layer["self"][0].cpu() for layer in weights])
        grid, method = rollout[0, 1:].reshape(shape).float(), ROLLOUT
    else:
        heads = weights[-1]["self"][0, :, 0, 1:].float().cpu().reshape(-1, *shape)
        grid, method = heads.mean(dim=0), LAST_LAYER
    best = int(probs.argmax())
    title = f"{Path(path).name}: {classifier.classes[best]} ({float(probs[best]):.0%}); [CLS] {method}"
    return ImageAttention(image, grid, heads), title


Maps = list[AttentionMap] | ImageAttention
ATTENTION: dict[str, Callable[[Any, str, str | None], tuple[Maps, str]]] = {
    "lm": titled_lm_attention,
    "translation": titled_translation_attention,
    "mlm": titled_bert_attention,
    "encoder": titled_bert_attention,
    "classify": titled_bert_attention,
    "tag": titled_bert_attention,
    "image": image_attention,
}
"""The run kinds whose attention ``vaswani attention`` draws → the maps of one input of a run's
wrapper (of the part that ``--part`` names; None: the default) and their title."""
