"""Token tagging beyond UPOS: the two readers (CoNLL-U with ``--column``, column files with
``-DOCSTART-``) and how a file is told apart, the F1 of each tag and BIO span F1 (hand-worked
cases, and seqeval itself where the compare extra is installed), the gradient reaching only
first pieces, a toy NER tagset learned exactly from a column file, and ``vaswani tag``."""

from __future__ import annotations

import io
import json
import random
import re
from pathlib import Path

import pytest
import torch

from tests.helpers import write
from tests.test_tag import UD_SAMPLE, word_line
from vaswani.cli import main
from vaswani.config import ModelConfig
from vaswani.data.config import TagData
from vaswani.data.conll import Sentence, read_tagged
from vaswani.errors import ConfigError, DataError
from vaswani.metrics import accuracy_and_macro_f1, bio_spans, class_f1, is_bio, span_f1
from vaswani.models.tagger import BertTagger
from vaswani.pipelines.tag import Tagger, encode_words, tag_batch
from vaswani.tasks.tag import tagging_loss
from vaswani.tokenizer import WordPieceTokenizer

# ---------------------------------------------------------------------------------------------
# Reading


def test_a_two_column_file_reads_words_and_tags_skipping_docstart(tmp_path):
    text = "-DOCSTART- O\n\nJohn B-PER\nSmith\tI-PER\nruns   O\n\n\n-DOCSTART- O\nParis B-LOC\n"
    assert read_tagged(write(tmp_path / "ner.txt", text)) == [
        Sentence(("John", "Smith", "runs"), ("B-PER", "I-PER", "O"), (3, 4, 5)),
        Sentence(("Paris",), ("B-LOC",), (9,)),
    ]


def test_a_tab_separated_line_keeps_the_spaces_of_its_word(tmp_path):
    path = write(tmp_path / "ner.tsv", "New York\tB-LOC\nis\tO\n")
    assert read_tagged(path) == [Sentence(("New York", "is"), ("B-LOC", "O"), (1, 2))]


def test_conll2003_takes_the_last_column_by_default_and_column_n_on_request(tmp_path):
    path = write(tmp_path / "eng.train", "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n")
    assert read_tagged(path)[0].tags == ("B-ORG", "O")
    assert read_tagged(path, "2")[0].tags == ("NNP", "VBZ")
    assert read_tagged(path, "3")[0].tags == ("B-NP", "B-VP")


def test_conll_u_columns_by_name_in_any_case_or_number(tmp_path):
    line = "1\tcats\tcat\tNOUN\tNNS\tNumber=Plur\t0\troot\t0:root\t_\n"
    path = write(tmp_path / "a.conllu", line)
    assert read_tagged(path)[0].tags == ("NOUN",)
    assert read_tagged(path, "XPOS")[0].tags == read_tagged(path, "5")[0].tags == ("NNS",)
    assert read_tagged(path, "deprel")[0].tags == ("root",)
    assert read_tagged(path, "lemma")[0].tags == ("cat",)


def test_conll_u_is_told_apart_by_its_name_or_its_first_word_line(tmp_path):
    as_txt = read_tagged(write(tmp_path / "ud.txt", UD_SAMPLE))
    assert as_txt == read_tagged(write(tmp_path / "ud.conllu", UD_SAMPLE))
    assert as_txt[0].tags == ("PRON", "AUX", "PART", "VERB", "PUNCT")
    two = "the\tDET\ncat\tNOUN\n"
    with pytest.raises(DataError, match=r"two\.conllu:1: 2 tab-separated field\(s\), CoNLL-U has 10"):
        read_tagged(write(tmp_path / "two.conllu", two))
    assert read_tagged(write(tmp_path / "two.txt", two))[0].tags == ("DET", "NOUN")


@pytest.mark.parametrize(
    ("name", "text", "column", "words"),
    [
        ("c.txt", "the DET\ncat NOUN x\n", None, "c.txt:2: 3 columns where line 1 has 2"),
        ("c.txt", "the\n", None, "c.txt:1: 1 field; a column file has a word and its tag"),
        ("c.txt", "the DET\n", "3", "c.txt:1: --column 3, but the line has 2 columns"),
        ("c.txt", "the DET\n", "1", "c.txt: --column 1 is the words themselves"),
        ("c.txt", "the DET\n", "UPOS", "c.txt: --column UPOS names a CoNLL-U column"),
        ("c.txt", "the\t\n", None, "c.txt:1: no tag"),
        ("c.txt", "-DOCSTART- O\n\n", None, "c.txt: no sentences"),
        ("u.conllu", word_line("1", "a", "DET"), "11", "u.conllu: --column 11: a CoNLL-U file has 10"),
        ("u.conllu", word_line("1", "a", "DET"), "form", "u.conllu: --column form is FORM"),
        ("u.conllu", word_line("1", "a", "DET"), "FEATS", "u.conllu:1: word 1 has no FEATS tag"),
        ("u.conllu", "# sent_id = 1\n# text = a\n\n" + word_line("1", "a", "DET"), None,
         "u.conllu:1: a sentence without tokens (no word line before line 3)"),
        ("u.conllu", word_line("1", "a", "DET") + "\n1-2\tdon't" + "\t_" * 8 + "\n\n", None,
         "u.conllu:3: a sentence without tokens"),
    ],
)  # fmt: skip
def test_bad_tagged_files_and_columns_are_named(tmp_path, name, text, column, words):
    path = write(tmp_path / name, text)
    with pytest.raises(DataError, match=rf"^{re.escape(str(tmp_path))}/{re.escape(words)}"):
        read_tagged(path, column)


def test_a_column_that_names_nothing_is_a_config_error():
    with pytest.raises(ConfigError, match=r"'data.column': --column must be a CoNLL-U column .* got 'x1'"):
        TagData(train_file="a", dev_file="b", column="x1")
    assert TagData(train_file="a", dev_file="b", column="7").column == "7"


# ---------------------------------------------------------------------------------------------
# Scores


def test_the_f1_of_each_class_by_hand():
    predicted, gold = torch.tensor([0, 0, 1, 2, 2]), torch.tensor([0, 1, 1, 2, 0])
    f1 = class_f1(predicted, gold)
    assert f1 == {0: 2 * 1 / (2 + 2), 1: 2 * 1 / (1 + 2), 2: 2 * 1 / (2 + 1)}
    accuracy, macro_f1 = accuracy_and_macro_f1(predicted, gold)
    assert accuracy == pytest.approx(0.6) and macro_f1 == sum(f1.values()) / 3


@pytest.mark.parametrize(
    ("tags", "spans"),
    [
        (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 1), ("LOC", 3, 3)]),
        (["O", "I-PER", "I-PER", "O"], [("PER", 1, 2)]),  # an I- after O starts a span
        (["I-LOC"], [("LOC", 0, 0)]),  # ... and so does one at the start
        (["B-PER", "I-LOC", "I-LOC"], [("PER", 0, 0), ("LOC", 1, 2)]),  # a change of type starts one
        (["B-PER", "B-PER", "I-PER"], [("PER", 0, 0), ("PER", 1, 2)]),  # B- starts one after B-
        (["I-PER", "I-PER", "B-PER", "O", "I-ORG"], [("PER", 0, 1), ("PER", 2, 2), ("ORG", 4, 4)]),  # IOB1
        (["O", "O"], []),
        (["B-MISC-X", "I-MISC-X"], [("MISC-X", 0, 1)]),
    ],
)
def test_bio_spans_by_hand(tags, spans):
    assert bio_spans(tags) == spans


def test_span_f1_counts_exact_type_and_boundaries_per_sentence():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    predicted = [["B-PER", "O", "O", "B-LOC"], ["B-PER", "O"]]  # PER cut short, ORG mistyped
    assert span_f1(gold, predicted) == (1 / 3, 1 / 3, 1 / 3, 3, 3)
    assert span_f1([["B-PER", "O"]], [["B-PER", "O"]]) == (1.0, 1.0, 1.0, 1, 1)
    assert span_f1([["O"], ["B-PER"]], [["B-PER"], ["O"]]) == (0.0, 0.0, 0.0, 1, 1)  # not across sentences
    assert span_f1([["O"]], [["O"]]) == (0.0, 0.0, 0.0, 0, 0)
    assert span_f1([["B-A", "I-A", "O"]], [["B-A", "I-A", "I-A"]]) == (0.0, 0.0, 0.0, 1, 1)


def test_bio_tag_sets():
    assert is_bio(["B-PER", "I-PER", "O"]) and is_bio(["I-LOC", "O"])
    assert not is_bio(["O"]) and not is_bio(["NOUN", "VERB"]) and not is_bio(["B-PER", "E-PER", "O"])
    assert not is_bio(["B-", "O"])


def random_bio(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(["O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-ORG"]) for _ in range(n)]


def test_spans_and_span_f1_equal_seqeval():
    """seqeval's default mode (``get_entities``, ``precision_score``, ``recall_score``,
    ``f1_score``) on random BIO sequences, I- after O and changes of type included."""
    sequence_labeling = pytest.importorskip("seqeval.metrics.sequence_labeling")
    from seqeval.metrics import f1_score, precision_score, recall_score

    rng = random.Random(0)
    for _ in range(200):
        tags = random_bio(rng, rng.randint(1, 12))
        assert bio_spans(tags) == sequence_labeling.get_entities(tags)
    for _ in range(50):
        gold = [random_bio(rng, rng.randint(1, 8)) for _ in range(rng.randint(1, 6))]
        predicted = [
            [t if rng.random() < 0.7 else rng.choice(["O", "B-PER", "I-LOC"]) for t in s] for s in gold
        ]
        precision, recall, f1, _, _ = span_f1(gold, predicted)
        assert precision == pytest.approx(precision_score(gold, predicted), abs=1e-12)
        assert recall == pytest.approx(recall_score(gold, predicted), abs=1e-12)
        assert f1 == pytest.approx(f1_score(gold, predicted), abs=1e-12)


# ---------------------------------------------------------------------------------------------
# First pieces only


def test_only_first_pieces_receive_gradient(tmp_path):
    """The loss's gradient with respect to the encoder's output is zero at every token that is not
    a word's first piece ([CLS], the later pieces of a word, [SEP], padding) and not at the others."""
    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "play", "##ing", "##ed"]
    tokenizer = WordPieceTokenizer.from_vocab(
        write(tmp_path / "vocab.txt", "".join(f"{p}\n" for p in pieces))
    )
    torch.manual_seed(0)
    cfg = ModelConfig.preset(
        "bert-base", src_vocab_size=16, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, max_len=16
    )
    model = BertTagger(cfg, n_tags=3)
    batch = tag_batch(encode_words(tokenizer, [["the", "playing", "cat"], ["played"]]), 0, [0, 1, 2, 1])
    seen: list[torch.Tensor] = []

    def keep(_module: torch.nn.Module, _inputs: object, out: torch.Tensor) -> None:
        out.retain_grad()
        seen.append(out)

    model.bert.register_forward_hook(keep)
    tagging_loss(model, batch)[0].backward()
    grad = seen[0].grad.abs().sum(dim=-1)
    assert batch.first.tolist() == [[False, True, True, False, True, False], [False, True] + [False] * 4]
    assert torch.all(grad[~batch.first] == 0) and torch.all(grad[batch.first] > 0)


# ---------------------------------------------------------------------------------------------
# A toy NER tagset, learned exactly from a column file; vaswani tag

ENTITIES = {"PER": [["john", "smith"], ["ada"]], "LOC": [["new", "york"], ["paris"]]}
OTHER = ["met", "saw", "in", "and", "today", "."]


def toy_ner(rng: random.Random) -> list[tuple[str, str]]:
    """Words and BIO tags: entities (PER, LOC) among other words."""
    words: list[tuple[str, str]] = []
    for _ in range(rng.randint(2, 5)):
        if rng.random() < 0.5:
            kind = rng.choice(list(ENTITIES))
            name = rng.choice(ENTITIES[kind])
            words += [(w, f"{'B' if i == 0 else 'I'}-{kind}") for i, w in enumerate(name)]
        else:
            words.append((rng.choice(OTHER), "O"))
    return words


@pytest.fixture(scope="module")
def ner_run(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("ner")
    rng = random.Random(0)
    rows = ["-DOCSTART- O\n\n"] + ["".join(f"{w} {t}\n" for w, t in toy_ner(rng)) + "\n" for _ in range(120)]
    data = write(folder / "train.txt", "".join(rows))
    args = [
        "train", "tag", "--train", str(data), "--dev", str(data), "--out", str(folder / "run"),
        "--d-model", "32", "--heads", "2", "--d-ff", "64", "--layers", "1", "--vocab-size", "60",
        "--max-len", "32", "--epochs", "12", "--lr", "5e-3", "--quiet", "--no-bf16",
    ]  # fmt: skip
    assert main(args) == 0
    return folder / "run", data


def test_a_toy_ner_tagset_is_learned_exactly(ner_run, capsys):
    run, data = ner_run
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["valid_accuracy"] == 1.0 and metrics["valid_macro_f1"] == 1.0
    assert metrics["valid_span_f1"] == 1.0
    assert json.loads((run / "config.json").read_text())["data"]["tags"] == [
        "B-LOC",
        "B-PER",
        "I-LOC",
        "I-PER",
        "O",
    ]
    capsys.readouterr()
    assert main(["evaluate", str(run), "--labeled", str(data)]) == 0
    lines = capsys.readouterr().out.splitlines()
    spans = sum(len(bio_spans(s.tags)) for s in read_tagged(data))
    assert lines[0].startswith("accuracy 100.0%") and lines[1] == "macro-F1 1.000 (the mean F1 of 5 tags)"
    assert lines[2].startswith(
        f"span F1 1.000  precision 1.000  recall 1.000  ({spans} gold spans, {spans} predicted"
    )
    gold = [t for s in read_tagged(data) for t in s.tags]
    assert lines[4:] == [f"{t:<5}   1.000  {gold.count(t):7d}  {gold.count(t):9d}" for t in sorted(set(gold))]


def test_vaswani_tag_prints_each_word_with_its_tag(ner_run, tmp_path, capsys, monkeypatch):
    """The texts' words and tags, WORD<TAB>TAG a line and a blank line after each text: what
    Tagger.tag gives, and a column file that reads back as those sentences."""
    run, _ = ner_run
    texts = ["john smith met ada in paris", "new york today ."]
    capsys.readouterr()
    assert main(["tag", str(run), *texts]) == 0
    printed = capsys.readouterr().out
    expected = Tagger.load(run).tag([t.split() for t in texts])
    assert expected[0] == ["B-PER", "I-PER", "O", "B-PER", "O", "B-LOC"]
    back = read_tagged(write(tmp_path / "tagged.txt", printed))
    assert [list(s.words) for s in back] == [t.split() for t in texts]
    assert [list(s.tags) for s in back] == expected
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO("\n".join(texts).encode())))
    assert main(["tag", str(run), "--device", "cpu"]) == 0
    assert capsys.readouterr().out == printed
