"""Seeing what the encoders learned: ``vaswani attention`` of every run with an encoder (BERT runs of
each task, the translation encoder, the ViT's last layer) and ``vaswani embed --tokens``/``--word``."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers import copied_run, encoder_run
from tests.test_plots import assert_png, panels
from tests.test_tag import tiny_tag_args, write_tagged
from vaswani.cli import main
from vaswani.errors import ConfigError, DataError
from vaswani.inspect.attention import ATTENTION, bert_attention, encoder_of, translation_attention
from vaswani.pipelines.encoder import SentenceEncoder, word_pieces
from vaswani.plots import attention_figure
from vaswani.tasks import registry

BERT_TASKS = ("mlm", "classify", "encoder", "tag")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A run of each task with an encoder: the fixture runs, an encoder run and a tiny tagger."""
    folder = tmp_path_factory.mktemp("encoders")
    found = {}
    for task in ("mlm", "classify", "translation"):
        (folder / task).mkdir()
        found[task] = copied_run(task, folder / task)[0]
    found["encoder"] = encoder_run(folder)
    write_tagged(folder / "train.conllu", 60, seed=0)
    write_tagged(folder / "dev.conllu", 10, seed=1)
    assert main(tiny_tag_args(folder, folder / "tag", "--epochs", "1")) == 0
    found["tag"] = folder / "tag"
    return found


def reference_weights(bert: torch.nn.Module, tokens: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
    """softmax(q kᵀ / sqrt(d_head)) of the first post-LN layer, from its projections of the
    embedding output: (heads, seq, seq)."""
    attention = bert.blocks.layers[0].self_attn
    x = bert.embed(tokens, segments=segments if bert.embed.segment is not None else None)
    q, k, _ = attention._project(x, x, None, None)
    return (q @ k.transpose(-1, -2) / math.sqrt(attention.d_head)).softmax(dim=-1)[0]


@pytest.mark.parametrize("task", BERT_TASKS)
def test_bert_attention_is_the_model_s_own_weights(runs, task, tmp_path):
    wrapper = registry.load(runs[task], "cpu")
    bert = encoder_of(wrapper)
    assert bert.config.norm_placement == "post"
    text = "the cat sees a dog" if task == "tag" else "one two three four"
    maps, title = ATTENTION[task](wrapper, text, None)
    (drawn,) = maps
    ids, segments = wrapper.tokenizer.encode_segments(text)
    assert drawn.keys[0] == "[CLS]" and drawn.keys[-1] == "[SEP]" and len(drawn.keys) == len(ids)
    assert drawn.queries == drawn.keys and title == text
    with torch.no_grad():
        _, weights = bert.hidden(torch.tensor([ids]), torch.tensor([segments]), need_weights=True)
        reference = reference_weights(bert, torch.tensor([ids]), torch.tensor([segments]))
    torch.testing.assert_close(drawn.weights, torch.stack([w["self"][0] for w in weights]))
    torch.testing.assert_close(drawn.weights[0], reference, atol=1e-6, rtol=1e-5)
    out = tmp_path / f"{task}.png"
    assert main(["attention", str(runs[task]), text, "--out", str(out), "--layer", "0", "--head", "1"]) == 0
    assert_png(out, min_side=150)


def test_a_sentence_pair_reads_with_its_segments(runs):
    wrapper = registry.load(runs["classify"], "cpu")
    (drawn,) = bert_attention(encoder_of(wrapper), wrapper.tokenizer, "one two\tthree")
    assert drawn.keys.count("[SEP]") == 2 and drawn.keys[0] == "[CLS]"
    with pytest.raises(DataError, match="the text is empty"):
        bert_attention(encoder_of(wrapper), wrapper.tokenizer, "one\t ")
    with pytest.raises(ConfigError, match="--part cross: a BERT run draws self"):
        ATTENTION["classify"](wrapper, "one", "cross")


def test_the_translation_encoder_s_self_attention(runs, tmp_path):
    translator = registry.load(runs["translation"], "cpu")
    sentence = "a b c"
    (encoder,), _ = translation_attention(translator, sentence, ["encoder"])
    model = translator.model
    src = torch.tensor([translator.src_tok.encode(sentence)])
    with torch.no_grad():
        _, weights = model.encoder(model.src_embed(src), None, need_weights=True)
    torch.testing.assert_close(encoder.weights, torch.stack([w["self"][0] for w in weights]))
    assert encoder.keys == encoder.queries and (encoder.query_axis, encoder.key_axis) == ("source", "source")
    default, _ = translation_attention(translator, sentence)
    assert [m.name for m in default] == ["cross-attention", "decoder self-attention"]
    fig = attention_figure([*default, encoder])
    n_layers = min(model.config.n_decoder_layers, model.config.n_encoder_layers)  # the layers all maps have
    assert len(panels(fig)) == 3 * n_layers * model.config.n_heads
    out = tmp_path / "encoder.png"
    assert (
        main(["attention", str(runs["translation"]), sentence, "--out", str(out), "--part", "encoder"]) == 0
    )
    assert_png(out, min_side=150)
    assert main(["attention", str(runs["translation"]), sentence, "--out", str(out), "--part", "self"]) == 2


def test_embed_word_is_the_cosine_of_its_pieces_vectors(runs, capsys):
    encoder = SentenceEncoder.load(runs["mlm"], "cpu")
    texts = ["one two three", "five six two", "Two two two"]
    vectors = encoder.word_vectors("two", texts)
    direct = []
    for text in texts:
        ids, segments = encoder.tokenizer.encode_segments(text)
        with torch.no_grad():
            hidden = encoder.model(torch.tensor([ids]), torch.tensor([segments]))[0]
        at = encoder.tokenizer.tokenizer.encode(text).tokens.index("two")  # the first occurrence
        direct.append(hidden[at])
    torch.testing.assert_close(vectors, torch.stack(direct))
    unit = torch.nn.functional.normalize(torch.stack(direct), dim=-1)
    assert main(["embed", str(runs["mlm"]), "--word", "TWO", *texts]) == 0
    out = capsys.readouterr().out.splitlines()
    matrix = [[float(x) for x in line.split()[1:]] for line in out[-3:]]
    np.testing.assert_allclose(matrix, (unit @ unit.T).numpy(), atol=1e-4)
    assert "of 'TWO', the mean of its pieces" in out[-5]
    assert main(["embed", str(runs["mlm"]), "--word", "two", "one two", "four"]) == 2
    assert capsys.readouterr().err.strip() == "vaswani: error: text 2 does not contain the word 'two': four"


def test_a_word_of_several_pieces_is_their_mean(runs):
    encoder = SentenceEncoder.load(runs["encoder"], "cpu")
    pieces = encoder.tokenizer.tokenize("onetwo")
    assert len(pieces) > 1
    text = "three onetwo four"
    at = word_pieces(encoder.tokenizer, "onetwo", text)
    start = 1 + len(encoder.tokenizer.tokenize("three"))  # after [CLS] and the pieces of "three"
    assert at == list(range(start, start + len(pieces)))
    _, hidden = encoder.token_vectors(text)
    torch.testing.assert_close(encoder.word_vectors("onetwo", [text])[0], hidden[at].mean(dim=0))
    assert word_pieces(encoder.tokenizer, "three four", text) == []
    four = len(encoder.tokenizer.tokenize("four"))
    assert word_pieces(encoder.tokenizer, "onetwo four", text) == list(range(start, at[-1] + 1 + four))


def test_embed_tokens_prints_each_token_s_vector(runs, capsys):
    assert main(["embed", str(runs["tag"]), "--tokens", "the cat sees a dog", "--dims", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    encoder = SentenceEncoder.load(runs["tag"], "cpu")
    ids, hidden = encoder.token_vectors("the cat sees a dog")
    assert lines[0] == "1  the cat sees a dog" and len(lines) == 1 + len(ids)
    first = lines[1].split()
    assert first[:2] == ["0", "[CLS]"] and float(first[-1]) == pytest.approx(
        float(hidden[0].norm()), abs=1e-4
    )
    assert float(first[2].strip("[,")) == pytest.approx(float(hidden[0, 0]), abs=1e-4)
    assert main(["embed", str(runs["tag"]), "--tokens", "a", "--out", "x.npy"]) == 2
