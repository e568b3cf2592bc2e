"""CTranslate2 models of translation runs (``vaswani export-ctranslate2``).

CTranslate2's own converter (``ctranslate2.converters.TransformersConverter``) reads a
``MarianMTModel`` folder as Marian's conventions have it: the decoder starts from a zero vector
(Marian's ``<pad>`` row, which it drops, with the last vocabulary entry), and one vocabulary,
the source tokenizer's, serves both sides. A vaswani run starts decoding from the embedding of
its ``<bos>``, pads its embeddings to a multiple of 64 and may have two vocabularies, so that
converter either refuses the folder of ``export-hf`` or gives other translations. This module
converts the same ``MarianMTModel`` with CTranslate2's Marian loader told otherwise: decoding
starts from the target tokenizer's start id, every embedding row is kept, and each side gets its
own vocabulary (the tokenizer's tokens by id, then ``<unused_N>`` for the padding rows). The
``ctranslate2`` and ``transformers`` packages are imported here only, when a run is converted.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from vaswani.config import ModelConfig
from vaswani.errors import ConfigError, RunDirError
from vaswani.interop import export_hf
from vaswani.interop.common import new_folder
from vaswani.pipelines.translation import SRC_TOKENIZER, TASK, TGT_TOKENIZER
from vaswani.rundir import RunDir
from vaswani.tokenizer import TextTokenizer


def vocabulary(tok: TextTokenizer, rows: int) -> list[str]:
    """The tokens of ``tok`` by id, then ``<unused_N>`` (N the row) up to ``rows`` embedding rows."""
    tokens = [str(tok.tokenizer.id_to_token(i)) for i in range(tok.vocab_size)]
    return tokens + [f"<unused_{i}>" for i in range(len(tokens), rows)]


def _spec(hf_folder: Path, cfg: ModelConfig, src_tok: TextTokenizer, tgt_tok: TextTokenizer) -> Any:
    """The CTranslate2 model specification of the ``MarianMTModel`` in ``hf_folder``, exported
    from a run of model config ``cfg`` and tokenizers ``src_tok`` and ``tgt_tok``."""
    source, target = vocabulary(src_tok, cfg.src_vocab_size), vocabulary(tgt_tok, cfg.tgt_vocab_size)
    import transformers
    from ctranslate2.converters import transformers as loaders

    class Loader(loaders.BartLoader):  # Marian's layers, without Marian's start and vocabulary
        def get_model_spec(self, model: Any) -> Any:
            model.config.normalize_before = False  # post-LN
            model.config.normalize_embedding = False  # no LayerNorm on the embeddings
            return super().get_model_spec(model)

        def set_config(self, config: Any, model: Any, tokenizer: Any) -> None:
            for role, token_id in (("bos", tgt_tok.bos_id), ("eos", tgt_tok.eos_id), ("unk", tgt_tok.unk_id)):
                setattr(config, f"{role}_token", str(tgt_tok.tokenizer.id_to_token(token_id)))
            config.decoder_start_token = config.bos_token

        def get_vocabulary(self, model: Any, tokenizer: Any) -> list[str]:
            return []  # set_vocabulary registers both sides

        def set_vocabulary(self, spec: Any, tokens: list[str]) -> None:
            spec.register_source_vocabulary(source)
            spec.register_target_vocabulary(target)

    progress = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # no bar for a folder just written
    try:
        model = transformers.MarianMTModel.from_pretrained(hf_folder)
    finally:
        if progress:
            transformers.utils.logging.enable_progress_bar()
    return Loader()(model, None)


def export_run(run_dir: Path, out_dir: Path, quantization: str | None = None) -> Path:
    """Write the ``translation`` run ``run_dir`` as a CTranslate2 model folder ``out_dir`` (a new
    or empty folder; ``model.bin``, ``config.json``, ``shared_vocabulary.json`` or the two
    vocabularies) and return it: its greedy translations are vaswani's, id for id (its beam
    search normalizes scores by length its own way).
    ``quantization`` is CTranslate2's (``int8``, ``float16``, ...; None keeps float32)."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    run = RunDir(run_dir).read_config()
    if run.task != TASK or run.model.arch == "rnn":
        raise RunDirError(f"{run_dir}: only Transformer translation runs convert to CTranslate2")
    try:
        import ctranslate2.converters
    except ImportError:
        raise ConfigError(
            "exporting to CTranslate2 needs the ctranslate2 package: pip install 'vaswani[ctranslate2]'"
        ) from None
    src_tok = TextTokenizer.load(run_dir / SRC_TOKENIZER)
    tgt_tok = TextTokenizer.load(run_dir / TGT_TOKENIZER)

    class Converter(ctranslate2.converters.Converter):
        def __init__(self, hf_folder: Path) -> None:
            self.hf_folder = hf_folder

        def _load(self) -> Any:
            return _spec(self.hf_folder, run.model, src_tok, tgt_tok)

    with tempfile.TemporaryDirectory() as tmp, new_folder(out_dir) as folder:
        hf_folder = export_hf(run_dir, Path(tmp) / "hf")
        Converter(hf_folder).convert(str(folder), quantization=quantization, force=True)
    return out_dir
