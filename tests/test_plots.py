"""Attention heatmaps and loss curves: the images are written, the panels are the model's weights,
CJK labels render (or one line says why not), and bad command-line input is one line."""

from __future__ import annotations

import csv
import json
import math
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure
from matplotlib.image import imread

from tests.helpers import tiny_args, tiny_lm_args, tiny_lm_run, write_lm_text, write_reverse_task
from vaswani.cli import main
from vaswani.config import ModelConfig
from vaswani.errors import ConfigError, DataError, RunDirError
from vaswani.inspect.attention import AttentionMap, lm_attention, token_labels, translation_attention
from vaswani.inspect.runs import compare_runs, comparison_table
from vaswani.models.gpt import GPT
from vaswani.models.transformer import Transformer
from vaswani.pipelines.lm import LanguageModel
from vaswani.pipelines.translation import Translator
from vaswani.plots import (
    attention_figure,
    cjk_font,
    loss_curves_figure,
    missing_glyphs,
    read_train_log,
    runs_figure,
)
from vaswani.tokenizer import LMTokenizer, TextTokenizer

EN_ZH = [
    ("the man reads a book", "男人在看书"),
    ("the woman reads a book", "女人在看书"),
    ("the man rides a bike", "男人在骑自行车"),
    ("the woman rides a bike", "女人在骑自行车"),
    ("a child reads", "孩子在看书"),
]


def panels(fig: Figure) -> list:
    """The heatmap axes (colour bars have no image)."""
    return [ax for ax in fig.axes if ax.images]


def assert_png(path: Path, min_side: int = 200) -> None:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = imread(path)
    assert pixels.ndim == 3 and min(pixels.shape[:2]) >= min_side
    assert pixels[..., :3].std() > 0.05  # not a blank image


@pytest.fixture(scope="module")
def zh_translator() -> Translator:
    """An untrained English→Chinese translator: 2 decoder layers, 2 heads."""
    torch.manual_seed(0)
    src_tok = TextTokenizer.train_bpe([s for s, _ in EN_ZH] * 3, 80)
    tgt_tok = TextTokenizer.train_bpe([t for _, t in EN_ZH] * 3, 80)
    cfg = ModelConfig(
        src_vocab_size=src_tok.vocab_size, tgt_vocab_size=tgt_tok.vocab_size, d_model=32, n_heads=2,
        d_ff=64, n_encoder_layers=2, n_decoder_layers=2, dropout=0.0, max_len=32, tie_embeddings="output",
    )  # fmt: skip
    return Translator(Transformer(cfg).eval(), src_tok, tgt_tok)


@pytest.fixture(scope="module")
def char_lm() -> LanguageModel:
    """An untrained character GPT: 3 layers, 2 heads."""
    torch.manual_seed(0)
    tok = LMTokenizer.train(["the cat sat on the mat\n猫坐在垫子上"], "char", 0)
    cfg = ModelConfig(
        arch="decoder_only", tgt_vocab_size=tok.vocab_size, d_model=32, n_heads=2, d_ff=64,
        n_decoder_layers=3, dropout=0.0, max_len=24, position="learned", norm="pre_ln",
    )  # fmt: skip
    return LanguageModel(GPT(cfg).eval(), tok)


def test_token_labels_make_word_starts_spaces_and_bytes_visible():
    text_tok = TextTokenizer.train_bpe(["Ein Mann fährt Fahrrad", "Ein Mann"] * 5, 60)
    ids = [text_tok.bos_id, *text_tok.encode("Ein Mann"), text_tok.eos_id]
    assert token_labels(text_tok.tokenizer, ids) == ["<bos>", "␣Ein", "␣Mann", "<eos>"]
    bpe = LMTokenizer.train(["中文 中文 中文\nhello world hello world"] * 5, "bpe", 300)
    labels = token_labels(bpe.tokenizer, [*bpe.encode("中文 hello\n"), bpe.eos_id])
    assert labels[0] == "中文" and "␣hello" in labels and "↵" in labels and labels[-1] == "<|endoftext|>"
    assert token_labels(bpe.tokenizer, [bpe.tokenizer.token_to_id("ä")]) == ["\\xe4"]  # a loose byte
    long = TextTokenizer.train_bpe(["Donaudampfschifffahrt"] * 20, 80)
    assert token_labels(long.tokenizer, long.encode("Donaudampfschifffahrt")) == ["␣Donaudampf…"]


def test_translation_heatmaps_are_the_decoders_weights(zh_translator, tmp_path):
    sentence = "the man reads a book"
    maps, translation = translation_attention(zh_translator, sentence)
    assert translation == zh_translator.translate([sentence])[0]
    cross, self_attn = maps
    assert cross.keys == ["␣the", "␣man", "␣reads", "␣a", "␣book"]
    assert self_attn.keys[0] == "<bos>" and self_attn.keys[1:] == cross.queries[:-1]
    fig = attention_figure(maps, title=f"{sentence} → {translation}", out=tmp_path / "attn.png")
    assert_png(tmp_path / "attn.png")
    drawn = panels(fig)
    assert len(drawn) == 2 * 2 * 2  # (cross + self) × layers × heads
    # the teacher-forced decoder gives these weights again, in panel order: map, layer, head
    model, tgt = zh_translator.model, zh_translator.tgt_tok
    src = torch.tensor([zh_translator.src_tok.encode(sentence)])
    produced = [tgt.tokenizer.token_to_id(label.replace("␣", "▁")) for label in cross.queries]
    tgt_in = torch.tensor([[tgt.bos_id, *produced[:-1]]])
    with torch.no_grad():
        logits, weights = model.decode(tgt_in, model.encode(src), need_weights=True)
    assert logits[0].argmax(-1).tolist() == produced  # greedy decoding read back teacher-forced
    expected = [
        weights[layer][kind][0, head] for kind in ("cross", "self") for layer in (0, 1) for head in (0, 1)
    ]
    for ax, want in zip(drawn, expected, strict=True):
        shown = np.asarray(ax.images[0].get_array())
        np.testing.assert_allclose(shown.sum(axis=1), 1.0, atol=1e-5)
        np.testing.assert_allclose(shown, want.numpy(), atol=1e-6)
    self_panel = np.asarray(drawn[4].images[0].get_array())
    assert np.allclose(np.triu(self_panel, k=1), 0.0)  # causal
    assert [ax.get_title() for ax in drawn[:2]] == ["layer 0 · head 0", "layer 0 · head 1"]


def test_chosen_layers_and_heads_and_bad_indices(zh_translator):
    maps, _ = translation_attention(zh_translator, "a child reads")
    fig = attention_figure(maps, layers=[1], heads=[0])
    assert [ax.get_title() for ax in panels(fig)] == ["layer 1 · head 0"] * 2
    with pytest.raises(ConfigError, match="layer 2 is out of range: the model has 2, 0 to 1"):
        attention_figure(maps, layers=[0, 2])
    with pytest.raises(ConfigError, match="head -1 is out of range"):
        attention_figure(maps, heads=[-1])


def test_lm_heatmaps_are_causal_self_attention(char_lm, tmp_path):
    maps = lm_attention(char_lm, "the cat")
    assert len(maps) == 1 and maps[0].keys == ["t", "h", "e", "␣", "c", "a", "t"]
    fig = attention_figure(maps, out=tmp_path / "lm.png")
    assert_png(tmp_path / "lm.png")
    drawn = panels(fig)
    assert len(drawn) == 3 * 2
    for ax in drawn:
        shown = np.asarray(ax.images[0].get_array())
        np.testing.assert_allclose(shown.sum(axis=1), 1.0, atol=1e-5)
        assert np.allclose(np.triu(shown, k=1), 0.0)
    with pytest.raises(DataError, match="the text is empty"):
        lm_attention(char_lm, "  ")
    with pytest.raises(DataError, match="30 tokens, more than the model's max_len=24"):
        lm_attention(char_lm, "the cat sat on the mat the cat")


def random_map(queries: list[str], keys: list[str], layers: int = 1, heads: int = 2) -> AttentionMap:
    torch.manual_seed(0)
    weights = torch.randn(layers, heads, len(queries), len(keys)).softmax(-1)
    return AttentionMap("cross-attention", weights, queries, keys, "target", "source")


def test_cjk_labels_render_or_one_line_says_why(tmp_path, capsys):
    zh = ["␣男人", "在", "骑", "自行车", "。", "<eos>"]
    attention = random_map(zh, ["␣Ein", "␣Mann", "␣fährt", "␣Fahrrad", "."])
    found, undrawn = cjk_font(missing_glyphs(zh))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        attention_figure(
            [attention], title="Ein Mann fährt Fahrrad. → 男人在骑自行车。", out=tmp_path / "zh.png"
        )
    assert_png(tmp_path / "zh.png")
    assert not [w for w in caught if "missing from font" in str(w.message)]
    err = capsys.readouterr().err
    if found is not None and not undrawn:  # a CJK font is installed: it draws every label
        assert err == ""
    else:
        (line,) = err.splitlines()
        assert line.startswith("vaswani: warning: no installed font has the characters ")
        assert "男" in line and "noto-cjk-sans-otc" in line and str(tmp_path / "zh.png") in line


def test_long_sequences_label_every_kth_token_in_a_bounded_figure():
    tokens = [f"t{i}" for i in range(150)]
    fig = attention_figure([random_map(tokens, tokens, layers=2, heads=2)])
    ax = panels(fig)[-2]  # bottom left: labels on both axes
    assert len([t for t in ax.get_xticklabels() if t.get_text()]) <= 40
    assert ax.get_yticklabels()[1].get_text() == "t4"  # every 4th of 150
    width, height = fig.get_size_inches()
    assert width < 15 and height < 15


def write_log(path: Path, header: str, rows: list[str]) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("header", "row", "n_panels"),
    [
        ("step,seconds,lr,train_loss,valid_loss,valid_ppl,valid_bleu,valid_chrf", "{l},{l},2.0,{b},{b}", 3),
        ("step,seconds,lr,train_loss,valid_loss,perplexity", "{l},{l},3.0", 3),
        ("step,seconds,lr,train_loss,valid_loss", "{l},{l}", 2),
    ],
)  # fmt: skip
def test_loss_curves(tmp_path, header, row, n_panels):
    rows = [
        f"{s},{s * 0.7},0.001," + row.format(l=5.0 / s**0.5, b=min(99, s / 10)) for s in range(50, 1001, 50)
    ]
    log = write_log(tmp_path / "train_log.csv", header, rows)
    fig = loss_curves_figure(log, tmp_path / "loss.png")
    assert len(fig.axes) == n_panels
    assert_png(tmp_path / "loss.png")
    assert [line.get_label() for line in fig.axes[0].get_lines()] == ["train", "valid"]
    assert fig.axes[1].get_xlabel() == "training time (min)"  # 700 s


def test_loss_curves_join_the_rows_of_each_kind(tmp_path):
    """A log of train rows every 10 steps and eval rows every 50: the train curve has every train
    row, the valid curves every eval row (no gaps where the other kind's rows are)."""
    header = "step,kind,seconds,lr,train_loss,grad_norm,tokens_per_second,valid_loss,perplexity"
    rows = []
    for step in range(10, 101, 10):
        rows.append(f"{step},train,{step / 10},0.001,{5 / step**0.5},0.9,1000,,")
        if step % 50 == 0:
            rows.append(f"{step},eval,{step / 10},,,,,{4 / step**0.5},{2.7 ** (4 / step**0.5)}")
    fig = loss_curves_figure(write_log(tmp_path / "train_log.csv", header, rows))
    train, valid = fig.axes[0].get_lines()
    assert list(train.get_xdata()) == list(range(10, 101, 10))
    assert list(valid.get_xdata()) == [50, 100]
    assert list(fig.axes[2].get_lines()[0].get_xdata()) == [5.0, 10.0]  # perplexity against seconds


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[Path, Path]:
    """Two tiny language models that differ in their learning rate and warmup only."""
    folder = tmp_path_factory.mktemp("two")
    text = write_lm_text(folder / "train.txt")
    steps = ("--max-steps", "20", "--eval-every", "10", "--log-every", "5")
    assert main(tiny_lm_args(text, folder / "a", *steps)) == 0
    assert main(tiny_lm_args(text, folder / "b", *steps, "--lr", "1e-3", "--warmup", "2")) == 0
    a, b = folder / "a", folder / "b"
    return a, b


def test_compare_lists_the_fields_that_differ_and_the_final_metrics(two_runs, tmp_path):
    a, b = two_runs
    metrics = json.loads((b / "metrics.json").read_text())
    shutil.copytree(b, tmp_path / "b")  # its final loss changed: the table reads metrics.json
    (tmp_path / "b" / "metrics.json").write_text(json.dumps({**metrics, "valid_loss": 1.2345}))
    comparison = compare_runs([a, tmp_path / "b"])
    assert comparison.differing == {"train.lr": [5e-3, 1e-3], "train.warmup_steps": [5, 2]}
    assert comparison.metrics["valid_loss"] == [
        json.loads((a / "metrics.json").read_text())["valid_loss"],
        1.2345,
    ]
    assert comparison.metrics["steps"] == [20, 20]
    assert "valid_loss_signature" not in comparison.metrics  # numbers only
    table = comparison_table(comparison).splitlines()
    assert [line.split()[0] for line in table[2:4]] == ["train.lr", "train.warmup_steps"]
    assert table[5].split()[-1] == "1.234"  # valid_loss of the second run, under it


def test_plot_of_several_runs_draws_one_line_per_run_in_each_panel(two_runs, tmp_path, capsys):
    a, b = two_runs
    fig = runs_figure({"a": a / "train_log.csv", "b": b / "train_log.csv"}, tmp_path / "runs.png")
    assert [ax.get_ylabel() for ax in fig.axes] == ["train loss", "valid loss", "perplexity"]
    for ax in fig.axes:
        assert [line.get_label() for line in ax.get_lines()] == ["a", "b"]
        assert [text.get_text() for text in ax.get_legend().get_texts()] == ["a", "b"]
    assert list(fig.axes[0].get_lines()[0].get_xdata()) == [5, 10, 15, 20]  # every train row
    assert list(fig.axes[1].get_lines()[1].get_xdata()) == [10, 20]  # every eval row
    assert_png(tmp_path / "runs.png")

    out = tmp_path / "cli.png"
    assert main(["plot", str(a), str(b), "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1] == str(out) and "train.lr" in printed[2]
    assert_png(out)
    assert main(["compare", str(a), str(b)]) == 0
    assert capsys.readouterr().out.splitlines() == printed[:-1]


def test_plot_of_several_runs_against_training_time(two_runs, tmp_path):
    """--against time: each point at its row's training seconds, in minutes once any run is longer
    than two minutes (runs given the same minutes compare at the same x)."""
    a, b = two_runs
    logs = {"a": a / "train_log.csv", "b": b / "train_log.csv"}
    read = read_train_log(logs["a"])
    eval_seconds = [s for s, v in zip(read["seconds"], read["valid_loss"], strict=True) if not math.isnan(v)]
    fig = runs_figure(logs, against="time")
    assert {ax.get_xlabel() for ax in fig.axes} == {"training time (s)"}
    assert list(fig.axes[1].get_lines()[0].get_xdata()) == eval_seconds

    with open(logs["b"], newline="", encoding="utf-8") as f:  # b, as a run of hours
        rows = list(csv.DictReader(f))
    for row in rows:
        row["seconds"] = str(float(row["seconds"]) + 3600)  # an hour in: longer than two minutes
    with open(tmp_path / "long.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    fig = runs_figure({"a": logs["a"], "long": tmp_path / "long.csv"}, against="time")
    assert fig.axes[0].get_xlabel() == "training time (min)"
    assert list(fig.axes[1].get_lines()[0].get_xdata()) == [s / 60 for s in eval_seconds]
    with pytest.raises(ValueError, match="against"):
        runs_figure(logs, against="steps")

    out = tmp_path / "cli.png"
    assert main(["plot", str(a), str(b), "--against", "time", "--out", str(out)]) == 0
    assert_png(out)


def test_loss_curves_refuse_missing_and_empty_logs(tmp_path):
    with pytest.raises(RunDirError, match="no training log"):
        loss_curves_figure(tmp_path / "train_log.csv")
    with pytest.raises(DataError, match="no rows yet"):
        loss_curves_figure(write_log(tmp_path / "empty.csv", "step,seconds,train_loss", []))
    with pytest.raises(DataError, match=r"bad.csv:3: column 'train_loss' is not a number"):
        loss_curves_figure(write_log(tmp_path / "bad.csv", "step,seconds,train_loss", ["1,1,2", "2,2,x"]))
    fig = loss_curves_figure(write_log(tmp_path / "one.csv", "step,seconds,train_loss", ["5,1.5,2.5"]))
    assert len(fig.axes) == 2


@pytest.fixture(scope="module")
def translation_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("plots")
    src, tgt = write_reverse_task(folder, n=200)
    assert main(tiny_args(src, tgt, folder / "run")) == 0
    return folder / "run"


def test_cli_attention_and_plot(translation_run, tmp_path, capsys):
    out = tmp_path / "attn.png"
    assert main(["attention", str(translation_run), "a b c", "--out", str(out), "--layers", "1"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert_png(out)
    assert main(["plot", str(translation_run)]) == 0
    assert capsys.readouterr().out.strip() == str(translation_run / "loss_curves.png")
    assert_png(translation_run / "loss_curves.png")


def test_cli_attention_of_a_language_model(tmp_path, capsys):
    run = tiny_lm_run(tmp_path, "--max-steps", "3")
    capsys.readouterr()
    out = tmp_path / "lm.svg"
    assert main(["attention", str(run), "the cat sat", "--out", str(out), "--heads", "1"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert out.read_text(encoding="utf-8").lstrip().startswith("<?xml")


def test_cli_bad_input_is_one_line(translation_run, tmp_path, capsys):
    no_log = tmp_path / "no_log"
    no_log.mkdir()
    shutil.copy(translation_run / "config.json", no_log / "config.json")
    empty_log = tmp_path / "empty_log"
    shutil.copytree(no_log, empty_log)
    (empty_log / "train_log.csv").write_text("step,seconds,train_loss\n", encoding="utf-8")
    run, png = str(translation_run), str(tmp_path / "a.png")
    config = json.loads((translation_run / "config.json").read_text())
    cases = {
        "the sentence is empty": ["attention", run, " ", "--out", png],
        "more than the model's max_len": [
            "attention",
            run,
            "a " * (config["model"]["max_len"] + 1),
            "--out",
            png,
        ],
        "layer 2 is out of range": ["attention", run, "a b", "--out", png, "--layers", "0,2"],
        "--heads: expected numbers": ["attention", run, "a b", "--out", png, "--heads", "first"],
        "cannot write": ["attention", run, "a b", "--out", str(tmp_path / "missing" / "a.png")],
        "not an image format": ["attention", run, "a b", "--out", str(tmp_path / "a.txt")],
        "no such run directory": ["plot", str(tmp_path / "nowhere")],
        "no training log": ["plot", str(no_log)],
        "no rows yet": ["plot", str(empty_log)],
        "plot positions takes one RUN_DIR": ["plot", "positions", run, run],
        "'curves' is neither a KIND": ["plot", "curves", run],
        "compare needs two runs or more": ["compare", run],
        "the same run given twice": ["compare", run, str(translation_run / ".")],
        "no_log/train_log.csv: no training log": ["plot", run, str(no_log), "--out", png],
    }
    for message, argv in cases.items():
        assert main(argv) == 2, message
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and err.startswith("vaswani: error: ") and message in err, err


@pytest.mark.parametrize(("heads", "grid"), [(12, (6, 4)), (2, (2, 2)), (6, (4, 4))])
def test_a_layers_heads_wrap_into_rows_of_at_most_four(heads, grid):
    fig = attention_figure([random_map(["a", "b"], ["c", "d", "e"], layers=2, heads=heads)])
    drawn = panels(fig)
    assert len(drawn) == 2 * heads
    assert {ax.get_subplotspec().get_geometry()[:2] for ax in drawn} == {grid}  # rows, columns
    # row by row: layer 0's heads first, then layer 1's, each layer starting a new row
    first_of_layer_1 = drawn[heads].get_subplotspec()
    assert (first_of_layer_1.rowspan.start, first_of_layer_1.colspan.start) == (grid[0] // 2, 0)
    assert [ax.get_title() for ax in drawn[heads - 1 : heads + 1]] == [
        f"layer 0 · head {heads - 1}",
        "layer 1 · head 0",
    ]
