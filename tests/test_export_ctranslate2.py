"""A trained translation run in CTranslate2 (``vaswani export-ctranslate2``): the same greedy ids
as vaswani's decoding; and the exported Hugging Face folder's target side, which
``AutoTokenizer`` does not read, named at export time (needs the ``ctranslate2`` extra)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers import tiny_args, write_reverse_task
from vaswani.cli import main
from vaswani.data.batching import pad
from vaswani.generation.config import DecodingConfig
from vaswani.generation.seq2seq import translate_ids
from vaswani.interop import import_hf
from vaswani.interop.ct2 import export_run
from vaswani.pipelines.translation import Translator

ctranslate2 = pytest.importorskip("ctranslate2")
pytest.importorskip("transformers")

TEXTS = ["a b c", "l h g f e", "d d a", "k j i h g f", "b", "e f g h i j k l"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A translation run trained long enough to reverse its sentences into capitals (two
    vocabularies)."""
    folder = tmp_path_factory.mktemp("ct2")
    src, tgt = write_reverse_task(folder)
    tgt.write_text(tgt.read_text(encoding="utf-8").upper(), encoding="utf-8")
    assert main(tiny_args(src, tgt, folder / "run", "--max-steps", "150")) == 0
    return folder / "run"


def ct2_ids(translator: Translator, model: Path, ids: list[list[int]], max_len: int) -> list[list[int]]:
    """CTranslate2's greedy translation for each source of ``ids``, as target ids (without EOS)."""
    ct2 = ctranslate2.Translator(str(model))
    tokens = [[translator.src_tok.tokenizer.id_to_token(i) for i in row] for row in ids]
    results = ct2.translate_batch(tokens, beam_size=1, max_decoding_length=max_len)
    return [[translator.tgt_tok.tokenizer.token_to_id(t) for t in r.hypotheses[0]] for r in results]


def without_eos(rows: torch.Tensor, eos: int) -> list[list[int]]:
    """Each row of ``rows`` up to its first ``eos``."""
    return [row[: row.index(eos)] if eos in row else row for row in rows.tolist()]


def test_ctranslate2_translates_as_vaswani_id_for_id(run, tmp_path, capsys):
    assert main(["export-ctranslate2", str(run), str(tmp_path / "ct2")]) == 0
    assert "wrote CTranslate2 model folder" in capsys.readouterr().out
    assert (tmp_path / "ct2" / "target_vocabulary.json").is_file()  # two vocabularies
    translator = Translator.load(run)
    tok = translator.tgt_tok
    ids = translator.src_tok.encode_batch(TEXTS)
    src = pad(ids, translator.src_tok.pad_id)
    greedy = translate_ids(translator.model, src, tok.bos_id, tok.eos_id, DecodingConfig(max_new_tokens=20))
    expected = without_eos(greedy.tokens, tok.eos_id)
    assert any(len(row) > 3 for row in expected)  # real translations, not all empty
    assert ct2_ids(translator, tmp_path / "ct2", ids, max_len=20) == expected


@pytest.mark.parametrize(
    "shape", range(3), ids=["swish-shared", "gelu-separate-tied", "swish-separate-untied"]
)
def test_an_imported_marian_model_translates_as_vaswani_with_pad_suppressed(tmp_path, shape):
    """Marian's layout (<pad> last, starting the decoder and never generated: CTranslate2's
    ``suppress_sequences``), shared, separate and untied vocabularies."""
    from tests.hf import MARIAN_CONFIGS, marian_folder, marian_model, marian_sources

    config = MARIAN_CONFIGS[shape]
    run = import_hf(marian_folder(tmp_path / "hf", marian_model(shape, **config), config), tmp_path / "run")
    export_run(run, tmp_path / "ct2")
    translator = Translator.load(run, "cpu")
    tok = translator.tgt_tok
    src, _ = marian_sources(config, seed=3)
    decoding = DecodingConfig(max_new_tokens=15)
    greedy = translate_ids(
        translator.model, src, tok.bos_id, tok.eos_id, decoding, suppress=tok.suppressed_ids
    )
    rows = [
        [translator.src_tok.tokenizer.id_to_token(i) for i in row if i != tok.pad_id] for row in src.tolist()
    ]
    suppressed = [[tok.tokenizer.id_to_token(i)] for i in tok.suppressed_ids]
    ct2 = ctranslate2.Translator(str(tmp_path / "ct2"))
    results = ct2.translate_batch(rows, beam_size=1, max_decoding_length=15, suppress_sequences=suppressed)
    theirs = [[tok.tokenizer.token_to_id(t) for t in r.hypotheses[0]] for r in results]
    assert theirs == without_eos(greedy.tokens, tok.eos_id)


def test_a_language_model_is_refused_in_one_line(tmp_path, capsys):
    from tests.helpers import tiny_lm_run

    lm = tiny_lm_run(tmp_path, "--max-steps", "1")
    assert main(["export-ctranslate2", str(lm), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "only Transformer translation runs" in err
    assert not (tmp_path / "out").exists()


def test_export_hf_names_the_target_tokenizer_that_auto_tokenizer_does_not_read(run, tmp_path, capsys):
    import transformers
    from tokenizers import Tokenizer

    assert main(["export-hf", str(run), str(tmp_path / "hf")]) == 0
    err = capsys.readouterr().err
    assert "AutoTokenizer reads only tokenizer.json" in err and "target_tokenizer.json" in err
    translator = Translator.load(run)
    target = translator.tgt_tok.encode_batch(["A B C D", "L K"])
    theirs = Tokenizer.from_file(str(tmp_path / "hf" / "target_tokenizer.json"))
    assert [theirs.decode(row) for row in target] == [translator.tgt_tok.decode(row) for row in target]
    source = translator.src_tok.encode_batch(["a b c d", "l k"])
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert [hf_tok(text)["input_ids"] for text in ["a b c d", "l k"]] == source
