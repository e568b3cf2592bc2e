"""The task registry, RunDir, the recipes and the generated flags: the layer that every command
dispatches through."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import FIXTURES, copied_run
from vaswani import recipes
from vaswani.cli import build_parser, main
from vaswani.cli.flags import add_fields, flag_names, given
from vaswani.config import FAMILY_FIELDS, ModelConfig, TrainConfig
from vaswani.data.config import LabeledData, LMData, ParallelData, TextData
from vaswani.errors import ConfigError, RunDirError
from vaswani.rundir import RunDir
from vaswani.schema import Config, flag
from vaswani.tasks import registry


def test_every_trainable_task_has_its_hooks_and_a_recipe_that_validates():
    for spec in registry.trainable():
        assert spec.recipe and spec.configure and spec.finish and spec.evaluate, spec.name
        sections = recipes.packaged(spec.recipe({}))
        assert set(sections) <= {"model", "train", "data"}
        files = {"train_file": "t", "dev_file": "d"} if "train_file" in spec.data.__dataclass_fields__ else {}
        spec.data.from_dict(sections.get("data", {}) | files)


@pytest.mark.parametrize("task", ["translation", "lm", "mlm"])
def test_the_default_job_is_budgeted_in_steps(task):
    run = registry.configure(task)
    assert run.task == task and run.train.max_minutes is None and run.train.max_steps <= 1000


def test_flags_recipes_and_files_are_merged_in_order(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("base: lm\nmodel: {d_model: 96, n_heads: 4}\ntrain: {lr: 0.01}\n", encoding="utf-8")
    run = registry.configure("lm", {"train": {"lr": 0.5}, "data": {"text": [str(recipe)]}}, config=recipe)
    lm = registry.configure("lm", {"data": {"text": [str(recipe)]}})
    assert (run.model.d_model, run.model.n_heads) == (96, 4)  # the file over the recipe
    assert run.train.lr == 0.5  # the flags over the file
    assert run.train.max_steps == lm.train.max_steps  # base: lm, the recipe for the user's text
    assert run.model.norm_placement == "pre" and run.model.arch == "decoder_only"  # gpt-mini's


def test_an_unknown_recipe_or_preset_is_one_line():
    with pytest.raises(ConfigError, match="unknown recipe 'nope'; choose from"):
        recipes.packaged("nope")
    with pytest.raises(ConfigError, match="unknown preset 'nope'"):
        registry.configure("lm", {"model": {"preset": "nope"}})


def test_a_run_of_an_unknown_task_gets_one_clear_line(tmp_path, capsys):
    run = tmp_path / "future"
    shutil.copytree(FIXTURES / "lm", run)
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    (run / "config.json").write_text(json.dumps({**config, "task": "summarization"}), encoding="utf-8")
    for argv in (
        ["evaluate", str(run), "--text", str(run / "config.json")],
        ["plot", str(run)],
        ["attention", str(run), "x", "--out", str(tmp_path / "a.png")],
        ["average", str(run), "--last", "1"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and "'summarization'" in err and "knows" in err, argv
    with pytest.raises(RunDirError, match="summarization"):
        registry.load(run)


@pytest.mark.parametrize(
    "task,wrapper",
    [("translation", "Translator"), ("lm", "LanguageModel"), ("mlm", "MaskedLanguageModel"),
     ("classify", "TextClassifier"), ("encoder", "SentenceEncoder")],
)  # fmt: skip
def test_load_gives_each_tasks_wrapper(task, wrapper, tmp_path):
    run, _ = copied_run(task, tmp_path)
    assert type(registry.load(run)).__name__ == wrapper


def test_rundir_reads_the_shared_data_section_of_old_runs_as_the_tasks_own(tmp_path):
    """An old run's data section held every task's fields; each task now reads its own, and a
    classifier's batch_size moves to the training section."""
    run = RunDir(FIXTURES / "classify").read_config("classify", LabeledData)
    assert run.train.batch_size == 32 and run.data.labels == ("negative", "positive")
    lm = RunDir(FIXTURES / "lm").read_config("lm", TextData)
    assert lm.data.tokenizer == "char" and "mask_prob" in {f.name for f in dataclasses.fields(TextData)}
    folder = tmp_path / "run"
    shutil.copytree(FIXTURES / "translation", folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["data"]["typo_field"] = 1
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"data\.typo_field"):  # a field no version wrote is refused
        RunDir(folder).read_config("translation", ParallelData)


def test_rundir_writes_what_it_reads(tmp_path):
    run = registry.configure("translation")
    folder = RunDir(tmp_path)
    folder.write_config(run)
    assert folder.read_config("translation", ParallelData) == run
    with pytest.raises(RunDirError, match="not 'lm'"):
        folder.read_config("lm", TextData)
    assert RunDir.new(tmp_path / "new", "x").path == tmp_path / "new"
    with pytest.raises(RunDirError, match="already exists"):
        RunDir.new(tmp_path, "x")


@dataclasses.dataclass(frozen=True)
class _Knobs(Config):
    _section = "knobs"
    depth: int = flag(3, "how deep")
    pair: tuple[int, int] = flag((0, 1), "two numbers")
    label: str | None = flag(None, "a name", flag="--name")
    on: bool = flag(False)


def test_a_new_field_gets_its_flag_help_and_value():
    parser = argparse.ArgumentParser()
    add_fields(parser, _Knobs)
    assert "how deep" in parser.format_help() and "--name" in parser.format_help()
    args = parser.parse_args(["--depth", "5", "--name", "x", "--on", "--pair", "2,3"])
    assert given(args, _Knobs) == {"depth": 5, "label": "x", "on": True, "pair": [2, 3]}
    assert given(parser.parse_args([]), _Knobs) == {}
    with pytest.raises(ConfigError, match="--pair: expected 2 values"):
        given(parser.parse_args(["--pair", "7"]), _Knobs)


def test_every_config_field_has_a_flag():
    """The train command offers every field of the training's and the task's data configs (the
    model's: those of the task's archs, below)."""
    options = _flags_of(build_parser(), "lm")
    for cls in (TrainConfig, LMData):
        for f in dataclasses.fields(cls):
            if f.metadata.get("flag", "") is not None:
                assert set(flag_names(f)) <= options, f.name


def test_a_flag_that_sets_a_bad_value_is_named(capsys, tmp_path):
    assert main(["train", "lm", "--warmup", "-1", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vaswani: error: --warmup: config field 'train.warmup_steps'"), err
    assert not Path(tmp_path / "r").exists()


def _help(task: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(["train", task, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def test_each_train_help_offers_only_its_own_familys_model_flags(capsys):
    translation, image, classify = (_help(task, capsys) for task in ("translation", "image", "classify"))
    for other in ("--image-size", "--patch-size", "--pooler", "--type-vocab-size"):
        assert other not in translation
    assert "--image-size" in image and "--patch-size" in image and "--pooler" not in image
    assert "--pooler" in classify and "--type-vocab-size" in classify and "--image-size" not in classify


def test_every_model_field_a_task_trains_is_still_a_flag_of_its_train_command():
    parser = build_parser()
    for spec in registry.trainable():
        flags = _flags_of(parser, spec.name)
        for field in dataclasses.fields(ModelConfig):
            if set(FAMILY_FIELDS.get(field.name, spec.archs)) & set(spec.archs):
                assert set(flag_names(field)) <= flags, (spec.name, field.name)
    image = parser.parse_args(["train", "image", "--image-size", "16", "--patch-size", "4"])
    assert (getattr(image, "model.image_size"), getattr(image, "model.patch_size")) == (16, 4)
    assert (
        getattr(parser.parse_args(["train", "mlm", "--type-vocab-size", "3"]), "model.type_vocab_size") == 3
    )


def _flags_of(parser: argparse.ArgumentParser, task: str) -> set[str]:
    """Every option string of ``vaswani train TASK``."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    tasks = next(a for a in commands.choices["train"]._actions if isinstance(a, argparse._SubParsersAction))
    return {name for action in tasks.choices[task]._actions for name in action.option_strings}


def test_every_packaged_recipe_reads():
    for name in recipes.names():  # a recipe's bases, single or listed, are read with it
        assert set(recipes.packaged(name)) <= {"model", "train", "data"}, name


def test_a_named_recipe_replaces_the_tasks_own_and_the_flags_still_win():
    default = registry.configure("translation")
    deep = registry.configure("translation", recipe="translation-deep-shallow")
    assert (deep.model.n_encoder_layers, deep.model.n_decoder_layers) == (6, 1)
    assert deep.train.max_steps == 3000 and deep.train.warmup_steps == default.train.warmup_steps
    assert deep.model.d_model == default.model.d_model and deep.data == default.data  # its base's
    flagged = registry.configure(
        "translation", {"train": {"max_steps": 7}}, recipe="translation-deep-shallow"
    )
    assert flagged.train.max_steps == 7 and flagged.model.n_encoder_layers == 6


def test_minimum_risk_training_starts_from_its_recipe_on_either_corpus(tmp_path):
    """``--objective mrt`` picks ``translation-mrt`` (``base: [translation, mrt]``), or with the user's
    files ``translation-files-mrt``: mrt.yaml's fields over each corpus's recipe."""
    text = tmp_path / "a.txt"
    text.write_text("x\n", encoding="utf-8")
    mrt = {"objective": "mrt", "init": str(tmp_path)}
    embedded = registry.configure("translation", {"data": mrt})
    files = registry.configure("translation", {"data": {**mrt, "src": str(text), "tgt": str(text)}})
    default, own = (
        registry.configure("translation"),
        registry.configure("translation", {"data": {"src": str(text), "tgt": str(text)}}),
    )
    for run, corpus in ((embedded, default), (files, own)):
        assert (run.data.mrt_candidates, run.data.mrt_search, run.data.mrt_weight) == (16, "beam", 0.3)
        assert (run.train.lr, run.train.schedule, run.train.warmup_steps) == (1e-4, "constant", 0)
        assert run.data.source == corpus.data.source and run.data.n_valid == corpus.data.n_valid
    assert registry.configure("translation", {"data": {**mrt, "mrt_candidates": 4}}).data.mrt_candidates == 4


def test_recipe_flag_errors_are_one_line(tmp_path, capsys):
    assert main(["train", "translation", "--recipe", "nope", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "--recipe: unknown recipe 'nope'; choose from" in err
    assert len(err.splitlines()) == 1 and "translation-deep-shallow" in err and not (tmp_path / "r").exists()
    assert main(["train", "translation", "--resume", str(tmp_path), "--recipe", "translation"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--recipe: a resumed run keeps its own settings" in err
