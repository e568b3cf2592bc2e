"""The ``import-hf`` and ``export-hf`` commands as a whole (each family's parity with
``transformers``: test_interop_bert.py, test_interop_gpt2.py, test_interop_marian.py and
test_interop_marian_spm.py)."""

from __future__ import annotations

import pytest

from vaswani.cli import main


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
