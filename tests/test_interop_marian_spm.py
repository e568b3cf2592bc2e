"""OPUS-MT folders as published (``source.spm``, ``target.spm``, ``vocab.json``, no
``tokenizer.json``): the imported run tokenizes as ``transformers``' ``MarianTokenizer`` and
translates as ``MarianMTModel.generate`` (needs ``sentencepiece`` and ``transformers``)."""

from __future__ import annotations

import json
import shutil
import string
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers import one_line
from tests.hf import MARIAN_CONFIGS, marian_generation_settings, marian_model
from vaswani.data.batching import pad
from vaswani.errors import DataError
from vaswani.generation.config import DecodingConfig
from vaswani.generation.seq2seq import translate_ids
from vaswani.interop import export_hf, import_hf
from vaswani.pipelines.translation import Translator

spm = pytest.importorskip("sentencepiece")
transformers = pytest.importorskip("transformers")
pytest.importorskip("google.protobuf")


MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"  # ../shared beside the clone
LINES = 400
REQUIRED = string.digits + string.punctuation
SENTENCES = [
    "A man in a blue shirt is standing on a ladder.",
    "Two dogs play in the snow!",
    "Is this the right way to the station?",
    "She bought 3 apples, 12 pears and 1,000 grapes.",
    "The café on the corner serves crème brûlée.",
    "A naïve façade: résumé, jalapeño, Zoë.",
    "Die Straße ist lang.",
    "Ein Mädchen läuft über die Brücke.",
    "Snowman ☃ and rocket 🚀 are unknown.",
    "日本語のテキスト",
    "  leading and trailing spaces  ",
    "many     spaces   between",
    "tabs\tand\nnewlines",
    "ＦＵＬＬＷＩＤＴＨ ｌｅｔｔｅｒｓ and ½ and ﬁne",
    "",
    " ",
    "a",
    "!!!",
    "(parentheses) [brackets] {braces}",
    "She said: \"quoted\" and 'single'.",
    "e-mail: someone@example.com, http://example.org/path?q=1",
    "100% sure; 3.14159 - 2.71828 = 0.42331",
    "UPPER CASE WORDS AND lower case words",
    "hyphenated-words and under_scores",
    "A woman, wearing a hat, walks; a child follows.",
    "Ñandú, Øresund, Łódź and Škoda.",
    "It's a dog's life, isn't it?",
    "ümlaut at the start",
    "A group of people are sitting at a table outdoors.",
    "#hashtag & ampersand * star ~ tilde",
]


def corpus(name: str, generated: list[str]) -> list[str]:
    """The first lines of multi30k's ``name`` when the data is there, else ``generated`` with the
    test sentences of every script that multi30k's text has (so that, as with multi30k, only the
    symbols, the emoji and the Japanese are unknown to the tokenizers)."""
    path = MULTI30K / name
    if path.is_file():
        return path.read_text(encoding="utf-8").splitlines()[:LINES]
    return [*generated, *(s for s in SENTENCES if not any(c in s for c in "☃🚀日"))]


def train_spm(lines: list[str], path: Path) -> list[str]:
    """Train a small SentencePiece unigram model on ``lines`` into ``path``; its normal pieces.

    Both sides know the digits and ASCII punctuation, so that no run of two characters is
    unknown to one side and known to the other, where vaswani and Marian differ (see
    :mod:`vaswani.interop.sentencepiece`); single characters of the other side (ß, ä, ü in an
    English text) are tested."""
    prefix = path.with_suffix("")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(prefix), vocab_size=250, model_type="unigram",
        character_coverage=1.0, hard_vocab_limit=False, minloglevel=2, required_chars=REQUIRED,
    )  # fmt: skip
    prefix.with_suffix(".model").rename(path)
    processor = spm.SentencePieceProcessor(model_file=str(path))
    return [
        processor.id_to_piece(i)
        for i in range(processor.get_piece_size())
        if not (processor.is_control(i) or processor.is_unknown(i))
    ]


@pytest.fixture(scope="module")
def opus(tmp_path_factory) -> tuple[Any, Any, Translator, dict[str, Any], Path]:
    """A random Marian model saved with OPUS-MT's tokenizer files (English → German), the
    ``MarianTokenizer`` of those files, the imported run, the model's config and its folder."""
    tmp = tmp_path_factory.mktemp("opus")
    folder = tmp / "hf"
    folder.mkdir()
    words = ["a", "dog", "runs", "in", "the", "park", "with", "two", "children", "blue", "shirt"]
    english = corpus("train.en", [" ".join(words[i % 7 : i % 7 + 4]) for i in range(200)])
    german = corpus("train.de", [f"Ein Mädchen läuft über die Straße {i}" for i in range(200)])
    pieces = train_spm(english, folder / "source.spm")
    pieces += [p for p in train_spm(german, folder / "target.spm") if p not in pieces]
    vocab = {"</s>": 0, "<unk>": 1, **{p: i + 2 for i, p in enumerate(pieces)}}
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    config = {**MARIAN_CONFIGS[0], "vocab_size": len(vocab)}
    hf = marian_model(11, **config)
    hf.save_pretrained(folder)
    marian = transformers.MarianTokenizer(
        str(folder / "source.spm"), str(folder / "target.spm"), str(folder / "vocab.json")
    )
    translator = Translator.load(import_hf(folder, tmp / "run"))
    return hf, marian, translator, config, folder


def test_the_folder_is_opus_mts_own(opus):
    *_, folder = opus
    assert not (folder / "tokenizer.json").exists()
    assert (folder / "model.safetensors").is_file()


def test_source_ids_equal_marian_tokenizers(opus):
    _, marian, translator, _, _ = opus
    expected = [marian(text)["input_ids"] for text in SENTENCES]
    assert translator.src_tok.encode_batch(SENTENCES) == expected
    assert any(1 in ids for ids in expected)  # some pieces are <unk>


def test_target_ids_equal_marian_tokenizers(opus):
    """Targets are cut with target.spm (German pieces); Marian appends </s> to them, vaswani's
    translation task does that itself."""
    _, marian, translator, _, _ = opus
    for text in SENTENCES:
        ours = translator.tgt_tok.encode(text)
        assert [*ours, 0] == marian(text_target=text)["input_ids"], text


def test_decoding_equals_marian_tokenizers(opus):
    _, marian, translator, config, _ = opus
    pad_id = config["vocab_size"] - 1
    generator = torch.Generator().manual_seed(12)
    rows = [marian(text_target=text)["input_ids"][:-1] for text in SENTENCES[:8]]
    rows += torch.randint(1, pad_id + 1, (20, 12), generator=generator).tolist()  # <unk>, <pad> too
    for ids in rows:
        assert translator.tgt_tok.decode(ids) == marian.decode(ids, skip_special_tokens=True), ids


def test_greedy_translation_equals_generate(opus):
    hf, marian, translator, config, _ = opus
    texts = SENTENCES[:5]
    tok = translator.src_tok
    src = pad(tok.encode_batch(texts), tok.pad_id)
    mask = src != tok.pad_id
    theirs = hf.generate(
        input_ids=src,
        attention_mask=mask,
        num_beams=1,
        max_new_tokens=20,
        **marian_generation_settings(config),
    )
    tgt = translator.tgt_tok
    decoding = DecodingConfig(max_new_tokens=20)
    ours = translate_ids(translator.model, src, tgt.bos_id, tgt.eos_id, decoding, suppress=tgt.suppressed_ids)
    assert torch.equal(ours.tokens, theirs[:, 1:])
    expected = [marian.decode(row, skip_special_tokens=True) for row in theirs.tolist()]
    assert translator.translate(texts, DecodingConfig(max_len_a=0, max_len_b=20)) == expected


def test_exported_tokenizer_json_encodes_as_marian(opus, tmp_path):
    """Downstream of the import, export-hf writes tokenizer.json, which transformers' fast
    tokenizer reads (vaswani's import-hf reads it back)."""
    _, marian, _, _, folder = opus
    out = export_hf(import_hf(folder, tmp_path / "run"), tmp_path / "out")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(out / "tokenizer.json"))
    assert [fast(text)["input_ids"] for text in SENTENCES] == [marian(t)["input_ids"] for t in SENTENCES]


@pytest.mark.parametrize("separate_vocabs", [False, True])
def test_exported_folder_tokenizes_sources_and_targets_as_the_original(opus, tmp_path, separate_vocabs):
    """The run keeps OPUS-MT's tokenizer files and export-hf writes them back: AutoTokenizer (a
    MarianTokenizer) and MarianTokenizer read the exported folder as they read the original one,
    targets (``text_target=``) too, which the source side's tokenizer.json gets wrong; also with
    a separate target vocabulary (``target_vocab.json``) and after a second import."""
    *_, opus_folder = opus
    folder = tmp_path / "hf"
    shutil.copytree(opus_folder, folder)
    if separate_vocabs:
        shutil.copy(folder / "vocab.json", folder / "target_vocab.json")
        (folder / "tokenizer_config.json").write_text(json.dumps({"separate_vocabs": True}))
    original = transformers.AutoTokenizer.from_pretrained(folder)
    assert type(original).__name__ == "MarianTokenizer" and original.separate_vocabs == separate_vocabs
    sources = [original(text)["input_ids"] for text in SENTENCES]
    targets = [original(text_target=text)["input_ids"] for text in SENTENCES]
    assert sources != targets  # two SentencePiece models: a target tokenized as a source differs
    run = import_hf(folder, tmp_path / "run")
    out = export_hf(run, tmp_path / "out")
    again = export_hf(import_hf(out, tmp_path / "again"), tmp_path / "out_again")
    for exported in (out, again):
        for tokenizer in (
            transformers.AutoTokenizer.from_pretrained(exported),
            transformers.MarianTokenizer.from_pretrained(exported),
        ):
            assert [tokenizer(text_target=text)["input_ids"] for text in SENTENCES] == targets
            assert [tokenizer(text)["input_ids"] for text in SENTENCES] == sources
            batch = tokenizer(SENTENCES[:4], text_target=SENTENCES[4:8])
            assert batch["labels"] == targets[4:8] and batch["input_ids"] == sources[:4]


def test_spm_without_vocab_json_is_refused_in_one_line(opus, tmp_path):
    *_, folder = opus
    src = tmp_path / "hf"
    shutil.copytree(folder, src)
    (src / "vocab.json").unlink()
    with pytest.raises(DataError) as exc:
        import_hf(src, tmp_path / "run")
    assert "source.spm without vocab.json" in one_line(exc)
    assert {p.name for p in tmp_path.iterdir()} == {"hf"}


def test_spm_without_sentencepiece_installed_is_refused_in_one_line(opus, tmp_path, monkeypatch):
    *_, folder = opus
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    with pytest.raises(DataError) as exc:
        import_hf(folder, tmp_path / "run")
    assert "pip install sentencepiece" in one_line(exc)
