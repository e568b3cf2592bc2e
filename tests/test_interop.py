"""The ``import-hf`` and ``export-hf`` commands as a whole (each family's parity with
``transformers``: test_interop_bert.py, test_interop_gpt2.py, test_interop_marian.py and
test_interop_marian_spm.py), and the helpers that name a refused file."""

from __future__ import annotations

import pytest

from tests.helpers import one_line
from vaswani.cli import main
from vaswani.errors import ConfigError, DataError
from vaswani.interop.common import fits_vocabulary, naming


def test_interop_help_names_every_family_and_its_tokenizer_files(capsys):
    """import-hf and export-hf say what they read and write: GPT-2, Marian (OPUS-MT's
    SentencePiece files, which import-hf does read) and BERT."""
    texts = {}
    for command in ("import-hf", "export-hf"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        texts[command] = " ".join(capsys.readouterr().out.split())
    for word in ("model_type gpt2", "model_type marian", "model_type bert", "source.spm", "vocab.txt"):
        assert word in texts["import-hf"], word
    assert "not read" not in texts["import-hf"]
    for word in ("as GPT-2", "as Marian", "(mlm), as BERT", "(encoder), as BERT", "SentencePiece"):
        assert word in texts["export-hf"], word


def test_naming_puts_the_file_before_a_refusal_of_the_kinds_it_names_and_keeps_the_kind(tmp_path):
    path = tmp_path / "config.json"
    for kind in (ConfigError, DataError):
        with pytest.raises(kind) as exc, naming(path, ConfigError, DataError):
            raise kind("field 'x': bad")
        assert one_line(exc) == f"{path}: field 'x': bad" and type(exc.value) is kind
    with pytest.raises(DataError) as exc, naming(path, ConfigError):
        raise DataError("not named")
    assert one_line(exc) == "not named"


def test_a_vocabulary_larger_than_the_models_is_refused_naming_the_file_and_the_field(tmp_path):
    fits_vocabulary(tmp_path / "tokenizer.json", 64, "vocab_size", 64)
    with pytest.raises(DataError) as exc:
        fits_vocabulary(tmp_path / "tokenizer.json", 65, "decoder_vocab_size", 64)
    assert one_line(exc) == (
        f"{tmp_path / 'tokenizer.json'}: vocabulary of 65 does not fit the model's decoder_vocab_size of 64"
    )
