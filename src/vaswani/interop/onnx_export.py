"""ONNX graphs of a run (``vaswani export-onnx``), for onnxruntime and the other ONNX runtimes.

Each graph has dynamic batch and sequence axes and is traced by ``torch.onnx.export``'s
TorchScript exporter (the dynamo one needs ``onnxscript``); ``onnx.json`` beside them says which
graphs there are, their inputs and outputs, and the token ids that decoding needs:

=================  ===============  ==========================================================
task               graph            inputs → outputs
=================  ===============  ==========================================================
lm                 model.onnx       input_ids → logits (batch, seq, vocab)
lm                 model_with_past  input_ids, attention_mask, past_key_values → logits,
                   .onnx            present_key_values
translation        encoder.onnx     input_ids → encoder_hidden_states (batch, src, d_model)
translation        decoder.onnx     decoder_input_ids, encoder_hidden_states, input_ids → logits
translation        decoder_with     decoder_input_ids, encoder_hidden_states, input_ids,
                   _past.onnx       past_key_values → logits, present_key_values
classify (BERT)    model.onnx       input_ids, token_type_ids, attention_mask → logits
mlm, encoder       encoder.onnx     input_ids, token_type_ids, attention_mask → last_hidden_state
=================  ===============  ==========================================================

The language model's ``model.onnx`` takes no attention mask: its rows are unpadded or
right-padded (a causal model's logits at the real tokens do not see the padding after them). The
translation decoder's ``input_ids`` are the source ids, whose padding the cross-attention masks.
Token ids are int64, the attention mask int64 (1 at real tokens; the language model's covers
the past and the new token, so left-padded rows decode too).

The ``_with_past`` graphs take one new token per row (``input_ids`` or ``decoder_input_ids``
(batch, 1)) and the keys and values of the tokens before it, ``past_key_values`` (layers, 2,
batch, kv_heads, past, d_head: keys, then values), and return the logits of the new token and
``present_key_values``, the same with the new token's appended (past + 1). Decoding starts from
a past of length 0 (a prompt is fed one token at a time), so a whole greedy loop needs only
them (and the encoder); the translation decoder recomputes its cross-attention keys from
``encoder_hidden_states`` at each step. Positions must be added to the embeddings or rotary
(:data:`POSITIONS`), without an attention window: the tracer fixes the sizes of the others' masks
and score biases, which are refused.
``onnx`` is imported here only, when a run is exported; ``torch.onnx`` needs it.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from vaswani.config import ModelConfig, RunConfig
from vaswani.errors import ConfigError, RunDirError
from vaswani.interop.common import new_folder
from vaswani.io import atomic_write, json_text
from vaswani.layers.blocks import LayerCache
from vaswani.layers.cache import KVCache
from vaswani.layers.masks import padding_mask
from vaswani.models.bert import BertClassifier
from vaswani.models.transformer import EncodedSource, Transformer
from vaswani.pipelines.classify import TextClassifier
from vaswani.pipelines.encoder import SentenceEncoder
from vaswani.pipelines.lm import LanguageModel
from vaswani.pipelines.translation import Translator
from vaswani.rundir import RunDir

OPSET = 17
METADATA = "onnx.json"
POSITIONS = ("sinusoidal", "sinusoidal_halves", "learned", "rope", "rope_interleaved")  # that trace
BATCH, SEQ, SRC, PAST, ALL = "batch", "sequence", "source_sequence", "past_sequence", "past_sequence + 1"
PAST_AXES = {2: BATCH, 4: PAST}  # of past_key_values (layers, 2, batch, kv_heads, past, d_head)
PRESENT_AXES = {2: BATCH, 4: ALL}


@dataclass(frozen=True)
class Graph:
    """One ONNX graph to write: ``module`` traced on ``example`` (its inputs, named ``inputs``),
    its outputs named ``outputs``; ``axes`` names the dynamic axes of each input and output."""

    file: str
    module: nn.Module
    example: tuple[Tensor, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    axes: dict[str, dict[int, str]]


class ConcatCache(KVCache):
    """A KV cache that traces: it starts from the past keys and values (batch, kv_heads, past,
    d_head) and concatenates the new ones (no buffer to grow, whose size the tracer would fix)."""

    def __init__(self, key: Tensor, value: Tensor) -> None:
        super().__init__()
        self.keys, self.values, self.length = key, value, key.shape[2]

    @property
    def key(self) -> Tensor:
        return self.keys

    @property
    def value(self) -> Tensor:
        return self.values

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        self.keys, self.values = torch.cat([self.keys, key], 2), torch.cat([self.values, value], 2)
        self.length = self.keys.shape[2]
        return self.keys, self.values


class PassThrough(KVCache):
    """A cross-attention cache that keeps nothing: its keys and values are computed from the
    encoder output at each step."""

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        return key, value


def _caches(past: Tensor) -> tuple[list[LayerCache], list[ConcatCache]]:
    """A layer cache per layer of ``past_key_values`` (layers, 2, batch, kv_heads, past, d_head),
    and their self-attention caches."""
    selves = [ConcatCache(layer[0], layer[1]) for layer in past.unbind(0)]
    return [LayerCache(cache, PassThrough()) for cache in selves], selves


def _present(selves: list[ConcatCache]) -> Tensor:
    """``present_key_values`` (layers, 2, batch, kv_heads, past + new, d_head) of ``selves``."""
    return torch.stack([torch.stack([cache.keys, cache.values]) for cache in selves])


def _past(cfg: ModelConfig, n_layers: int, batch: int, length: int) -> Tensor:
    """Example past keys and values, for tracing."""
    heads = cfg.n_kv_heads or cfg.n_heads
    return torch.zeros(n_layers, 2, batch, heads, length, cfg.d_model // cfg.n_heads)


class LMLogits(nn.Module):
    """A language model's logits of every position of ``input_ids``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor) -> Tensor:
        return self.model(input_ids)


class LMStep(nn.Module):
    """A language model's logits of one new token per row after the past keys and values, and
    the keys and values with the new token's."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor, past_key_values: Tensor
    ) -> tuple[Tensor, Tensor]:
        caches, selves = _caches(past_key_values)
        return self.model(input_ids, attention_mask.bool(), cache=caches), _present(selves)


class Encoder(nn.Module):
    """A translator's encoder output of the source ids."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor) -> Tensor:
        return self.model.encode(input_ids).memory


class Decoder(nn.Module):
    """A translator's logits of every position of the target prefix, given the encoder output and
    the source ids (whose padding the cross-attention masks)."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, decoder_input_ids: Tensor, encoder_hidden_states: Tensor, input_ids: Tensor) -> Tensor:
        source = EncodedSource(encoder_hidden_states, padding_mask(input_ids, self.model.config.pad_id))
        return self.model.decode(decoder_input_ids, source)[0]


class DecoderStep(nn.Module):
    """A translator's logits of one new target token per row after the past keys and values of
    the target prefix, and the keys and values with the new token's."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        decoder_input_ids: Tensor,
        encoder_hidden_states: Tensor,
        input_ids: Tensor,
        past_key_values: Tensor,
    ) -> tuple[Tensor, Tensor]:
        caches, selves = _caches(past_key_values)
        mask = padding_mask(input_ids, self.model.config.pad_id)
        source = EncodedSource(encoder_hidden_states, mask, caches)
        # every target token is real: a mask of ones over past and new, made of the inputs (the
        # tracer would fix the sizes of a new tensor)
        seen = torch.ones_like(past_key_values[0, 0, :, 0, :, 0], dtype=torch.bool)
        target_mask = torch.cat([seen, torch.ones_like(decoder_input_ids, dtype=torch.bool)], 1)
        return self.model.decode(decoder_input_ids, source, target_mask=target_mask)[0], _present(selves)


class BertGraph(nn.Module):
    """A BERT classifier's logits or a BERT's hidden states, of tokens, segments and mask."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, attention_mask: Tensor) -> Tensor:
        return self.model(input_ids, token_type_ids, attention_mask.bool())


def _ids(batch: int, length: int) -> Tensor:
    """Example token ids for tracing: any ids in the vocabulary do, and every vocabulary has 1-3."""
    return torch.randint(1, 4, (batch, length), generator=torch.Generator().manual_seed(0))


def _bert_inputs() -> tuple[tuple[Tensor, ...], tuple[str, ...], dict[str, dict[int, str]]]:
    ids = _ids(2, 5)
    names = ("input_ids", "token_type_ids", "attention_mask")
    return (ids, torch.zeros_like(ids), torch.ones_like(ids)), names, {n: {0: BATCH, 1: SEQ} for n in names}


def graphs(run_dir: Path, run: RunConfig) -> tuple[list[Graph], dict[str, Any]]:
    """The graphs of the run ``run_dir`` (its config ``run``) and what ``onnx.json`` says beyond
    them (token ids, labels); a task without graphs is a :class:`RunDirError` naming those with,
    and so is a model whose attention the tracer cannot follow (positions as a bias on the scores,
    an attention window)."""
    if run.model.position not in POSITIONS or run.model.attn_window is not None:
        raise RunDirError(
            f"{run_dir}: ONNX export needs positions {', '.join(POSITIONS)} and no attention window; "
            f"the run has position {run.model.position!r}, attn_window {run.model.attn_window}"
        )
    if run.task == "lm":
        model = LanguageModel.load(run_dir, "cpu").model
        ids = _ids(2, 5)
        axes = {"input_ids": {0: BATCH, 1: SEQ}, "logits": {0: BATCH, 1: SEQ}}
        full = Graph("model.onnx", LMLogits(model), (ids,), ("input_ids",), ("logits",), axes)
        past = _past(run.model, run.model.n_layers, 2, 3)
        step = Graph(
            "model_with_past.onnx",
            LMStep(model),
            (ids[:, :1], torch.ones(2, 4, dtype=torch.long), past),
            ("input_ids", "attention_mask", "past_key_values"),
            ("logits", "present_key_values"),
            {
                "input_ids": {0: BATCH},
                "attention_mask": {0: BATCH, 1: ALL},
                "past_key_values": PAST_AXES,
                "logits": {0: BATCH},
                "present_key_values": PRESENT_AXES,
            },
        )
        return [full, step], {}
    if run.task == "translation" and run.model.arch != "rnn":
        translator = Translator.load(run_dir, "cpu")
        tok = translator.tgt_tok
        src = _ids(2, 6)
        tgt = _ids(2, 4)
        with torch.no_grad():
            memory = translator.model.encode(src).memory
        source_axes = {0: BATCH, 1: SRC}
        encoder = Graph(
            "encoder.onnx",
            Encoder(translator.model),
            (src,),
            ("input_ids",),
            ("encoder_hidden_states",),
            {"input_ids": source_axes, "encoder_hidden_states": source_axes},
        )
        decoder = Graph(
            "decoder.onnx",
            Decoder(translator.model),
            (tgt, memory, src),
            ("decoder_input_ids", "encoder_hidden_states", "input_ids"),
            ("logits",),
            {
                "decoder_input_ids": {0: BATCH, 1: SEQ},
                "encoder_hidden_states": source_axes,
                "input_ids": source_axes,
                "logits": {0: BATCH, 1: SEQ},
            },
        )
        layers = run.model.n_decoder_layers or run.model.n_layers
        step = Graph(
            "decoder_with_past.onnx",
            DecoderStep(translator.model),
            (tgt[:, :1], memory, src, _past(run.model, layers, 2, 3)),
            ("decoder_input_ids", "encoder_hidden_states", "input_ids", "past_key_values"),
            ("logits", "present_key_values"),
            {
                "decoder_input_ids": {0: BATCH},
                "encoder_hidden_states": source_axes,
                "input_ids": source_axes,
                "past_key_values": PAST_AXES,
                "logits": {0: BATCH},
                "present_key_values": PRESENT_AXES,
            },
        )
        token_ids = {
            "decoder_start_token_id": tok.bos_id,
            "eos_token_id": tok.eos_id,
            "pad_token_id": tok.pad_id,
        }
        return [encoder, decoder, step], {**token_ids, "suppressed_token_ids": list(tok.suppressed_ids)}
    if run.task == "classify" and run.model.arch != "decoder_only":
        classifier = TextClassifier.load(run_dir, "cpu")
        assert isinstance(classifier.model, BertClassifier)
        example, names, axes = _bert_inputs()
        axes["logits"] = {0: BATCH}
        graph = Graph("model.onnx", BertGraph(classifier.model), example, names, ("logits",), axes)
        return [graph], {"labels": list(classifier.labels)}
    if run.task in ("mlm", "encoder"):
        bert = SentenceEncoder.load(run_dir, "cpu").model
        example, names, axes = _bert_inputs()
        axes["last_hidden_state"] = {0: BATCH, 1: SEQ}
        return [Graph("encoder.onnx", BertGraph(bert), example, names, ("last_hidden_state",), axes)], {}
    raise RunDirError(
        f"{run_dir}: runs of task {run.task!r} have no ONNX export; supported: lm, translation "
        "(Transformer), classify (BERT), mlm and encoder"
    )


def graph_bytes(graph: Graph, opset: int = OPSET) -> bytes:
    """The ONNX model of ``graph``, serialized."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on Python values it fixes
        torch.onnx.export(
            graph.module.eval(),
            graph.example,
            buffer,
            dynamo=False,
            input_names=list(graph.inputs),
            output_names=list(graph.outputs),
            dynamic_axes=graph.axes,
            opset_version=opset,
        )
    return buffer.getvalue()


@contextmanager
def _folder(out_dir: Path, force: bool) -> Iterator[Path]:
    """Where to write: ``out_dir`` itself with ``force`` when it is a folder already (its files of
    the same names replaced), else a new folder renamed into place (see ``new_folder``)."""
    if force and out_dir.is_dir():
        yield out_dir
    else:
        with new_folder(out_dir) as tmp:
            yield tmp


def export_run(run_dir: Path, out_dir: Path, force: bool = False) -> list[str]:
    """Write the ONNX graphs of the run ``run_dir`` and ``onnx.json`` into ``out_dir`` (new or
    empty, or any folder with ``force``) and return the graphs' file names."""
    try:
        import onnx  # noqa: F401  (torch.onnx's exporter needs it)
    except ImportError:
        raise ConfigError("exporting to ONNX needs the onnx package: pip install 'vaswani[onnx]'") from None
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    run = RunDir(run_dir).read_config()
    with _folder(out_dir, force) as folder:
        found, extra = graphs(run_dir, run)
        metadata = {
            "task": run.task,
            "opset": OPSET,
            "graphs": {g.file: {"inputs": list(g.inputs), "outputs": list(g.outputs)} for g in found},
            **extra,
        }
        for graph in found:
            atomic_write(folder / graph.file, graph_bytes(graph))
        atomic_write(folder / METADATA, json_text(metadata).encode("utf-8"))
    return [graph.file for graph in found]
