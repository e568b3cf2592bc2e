"""Neutral model field names: ``vocab_size`` and ``n_layers`` for every stack, an encoder-decoder's
per-side fields as overrides, and a single-stack model's old names (a GPT's ``tgt_vocab_size`` and
``n_decoder_layers``, a BERT's ``src_vocab_size`` and ``n_encoder_layers``) read as aliases from
every source: the constructor, ``replace``, ``from_dict``, YAML recipes and ``--config`` files,
presets, flags and the ``config.json`` of run directories already written; and the old combined
``norm`` values (``pre_ln``: a kind and a placement) in flags and config files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors import safe_open

from tests.helpers import FIXTURES
from vaswani import recipes
from vaswani.cli import build_parser, main, parse
from vaswani.cli.train import flags_of
from vaswani.config import ModelConfig
from vaswani.errors import ConfigError
from vaswani.models.bert import Bert
from vaswani.models.gpt import GPT
from vaswani.models.transformer import Transformer
from vaswani.rundir import RunDir
from vaswani.tasks import registry

SIDES = ("src_vocab_size", "tgt_vocab_size", "n_encoder_layers", "n_decoder_layers")
SMALL = {"d_model": 16, "n_heads": 2, "d_ff": 32}
UNTIED = {**SMALL, "tie_embeddings": "output"}  # an encoder-decoder whose vocabularies may differ


def sides_of(cfg: ModelConfig) -> tuple[int | None, ...]:
    return tuple(getattr(cfg, name) for name in SIDES)


# ---------------------------------------------------------------------------------------------
# The constructor and replace()


@pytest.mark.parametrize(
    ("arch", "vocab", "depth", "other_vocab", "other_depth"),
    [
        ("decoder_only", "tgt_vocab_size", "n_decoder_layers", "src_vocab_size", "n_encoder_layers"),
        ("encoder_only", "src_vocab_size", "n_encoder_layers", "tgt_vocab_size", "n_decoder_layers"),
    ],
)
def test_a_single_stack_reads_its_sides_old_names_and_drops_the_others(
    arch, vocab, depth, other_vocab, other_depth
):
    old = ModelConfig(arch=arch, **{vocab: 96, depth: 3, other_vocab: 32000, other_depth: 6}, **SMALL)
    assert (old.vocab_size, old.n_layers) == (96, 3)
    assert sides_of(old) == (None, None, None, None)
    assert old == ModelConfig(arch=arch, vocab_size=96, n_layers=3, **SMALL)
    # In the constructor the old name, when given, wins over the neutral field.
    assert ModelConfig(arch=arch, vocab_size=50, n_layers=9, **{vocab: 96, depth: 3}, **SMALL) == old


def test_replace_with_an_old_name_changes_a_single_stacks_field():
    gpt = ModelConfig(arch="decoder_only", vocab_size=96, n_layers=3, **SMALL)
    assert gpt.replace(tgt_vocab_size=64).vocab_size == 64
    assert gpt.replace(n_decoder_layers=5).n_layers == 5
    assert gpt.replace(n_encoder_layers=5) == gpt  # the other side's field is dropped
    bert = ModelConfig(arch="encoder_only", vocab_size=96, n_layers=3, **SMALL)
    assert bert.replace(src_vocab_size=64, n_encoder_layers=2) == bert.replace(vocab_size=64, n_layers=2)
    assert sides_of(bert.replace(src_vocab_size=64)) == (None, None, None, None)


def test_an_encoder_decoder_resolves_each_side():
    both = ModelConfig(vocab_size=80, n_layers=4, **UNTIED)
    assert sides_of(both) == (80, 80, 4, 4)
    apart = ModelConfig(vocab_size=80, n_layers=4, n_encoder_layers=2, tgt_vocab_size=64, **UNTIED)
    assert sides_of(apart) == (80, 64, 2, 4) and (apart.vocab_size, apart.n_layers) == (80, 4)
    # The neutral field holds the sides' common value: one model, one config.
    assert ModelConfig(src_vocab_size=64, tgt_vocab_size=64, n_encoder_layers=2, n_decoder_layers=2) == (
        ModelConfig(vocab_size=64, n_layers=2)
    )
    model = Transformer(apart)
    assert (len(model.encoder.layers), len(model.decoder.layers)) == (2, 4)
    assert (model.src_embed.token.num_embeddings, model.output.out_features) == (80, 64)


def test_replace_of_the_neutral_field_sets_every_stack_and_a_side_only_its_own():
    cfg = ModelConfig(n_encoder_layers=2, n_decoder_layers=3, vocab_size=64, **UNTIED)
    assert sides_of(cfg.replace(n_layers=5))[2:] == (5, 5)
    assert sides_of(cfg.replace(n_layers=5, n_encoder_layers=1))[2:] == (1, 5)
    assert sides_of(cfg.replace(n_decoder_layers=1))[2:] == (2, 1)
    assert sides_of(cfg.replace(src_vocab_size=128).replace(vocab_size=96))[:2] == (96, 96)


def test_the_models_are_built_from_the_neutral_fields():
    gpt = GPT(ModelConfig(arch="decoder_only", tgt_vocab_size=48, n_decoder_layers=3, **SMALL))
    assert (gpt.embed.token.num_embeddings, len(gpt.blocks.layers)) == (48, 3)
    bert = Bert(ModelConfig(arch="encoder_only", src_vocab_size=48, n_encoder_layers=2, **SMALL))
    assert (bert.embed.token.num_embeddings, len(bert.blocks.layers)) == (48, 2)


# ---------------------------------------------------------------------------------------------
# from_dict: a neutral name and its old name in one source


@pytest.mark.parametrize(
    ("arch", "fields", "named"),
    [
        ("decoder_only", {"vocab_size": 64, "tgt_vocab_size": 128}, "model.vocab_size"),
        ("decoder_only", {"n_layers": 4, "n_decoder_layers": 6}, "model.n_layers"),
        ("encoder_only", {"vocab_size": 64, "src_vocab_size": 128}, "model.vocab_size"),
        ("encoder_only", {"n_layers": 4, "n_encoder_layers": 6}, "model.n_layers"),
    ],
)
def test_a_field_and_its_old_name_with_other_values_are_refused_in_one_line(arch, fields, named):
    with pytest.raises(ConfigError) as caught:
        ModelConfig.from_dict({"arch": arch, **fields}, source="my.yaml")
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and message.startswith("my.yaml: ")
    assert named in message and next(k for k in fields if k != named[6:]) in message
    same = {k: fields[named[6:]] for k in fields}
    assert ModelConfig.from_dict({"arch": arch, **same}).n_layers == ModelConfig(arch=arch, **same).n_layers


def test_an_encoder_decoders_sides_in_from_dict_are_overrides_not_conflicts():
    cfg = ModelConfig.from_dict(
        {"n_layers": 4, "n_encoder_layers": 6, "vocab_size": 64, "tgt_vocab_size": 128, **UNTIED}
    )
    assert sides_of(cfg) == (64, 128, 6, 4)


def test_a_run_directory_with_a_conflict_is_refused_naming_the_file(tmp_path):
    run = Path(shutil.copytree(FIXTURES / "lm", tmp_path / "lm"))
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    config["model"]["n_layers"] = 5  # n_decoder_layers is 1
    (run / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"config\.json: config field 'model\.n_layers': 5, but"):
        RunDir(run).read_config()


# ---------------------------------------------------------------------------------------------
# Presets, recipes, --config files and flags


def test_presets_take_old_names_as_overrides():
    assert ModelConfig.preset("gpt-mini", tgt_vocab_size=512) == ModelConfig.preset(
        "gpt-mini", vocab_size=512
    )
    bert = ModelConfig.preset("bert-base", n_encoder_layers=4)
    assert (bert.n_layers, bert.vocab_size, bert.n_encoder_layers) == (4, 30522, None)
    assert ModelConfig.preset("gpt2").n_layers == 12 and ModelConfig.preset("transformer-small").n_layers == 3
    assert sides_of(ModelConfig.preset("transformer-small"))[2:] == (3, 3)


def test_the_presets_and_recipes_use_the_neutral_names_where_the_stacks_are_equal():
    configs = Path(__file__).parents[1] / "configs"
    paths = [*Path(recipes.FOLDER).glob("*.yaml"), *configs.glob("*.yaml")]
    assert len(paths) > 10
    for path in paths:
        text = path.read_text(encoding="utf-8")
        model = {} if path.stem == "presets" else recipes.read(path).get("model", {})
        for old in SIDES:  # a per-side name only where the two sides differ (a 6 + 1 model)
            side = SIDES[SIDES.index(old) ^ 1]
            assert old not in text or model.get(old) != model.get(side), (path.name, old)
    depths = {"cmn_eng": (3, 3), "multi30k": (3, 3), "shakespeare_char": (4, None)}
    depths["shakespeare_char_large"] = (6, None)
    for name, (depth, per_side) in depths.items():  # as deep as they were (3 + 3, 4, 6 layers)
        model = ModelConfig.from_dict(recipes.read(configs / f"{name}.yaml")["model"])
        assert (model.n_layers, model.n_encoder_layers, model.n_decoder_layers) == (depth, per_side, per_side)


def test_a_merge_of_sources_lets_a_later_old_name_replace_an_earlier_field():
    gpt = {"model": {"arch": "decoder_only", "n_layers": 4, "vocab_size": 96}}
    merged = recipes.merge(gpt, {"model": {"n_decoder_layers": 6, "tgt_vocab_size": 64}})
    cfg = ModelConfig.from_dict(merged["model"])
    assert (cfg.n_layers, cfg.vocab_size) == (6, 64)
    translator = {"model": {"n_encoder_layers": 1, "n_decoder_layers": 2}}
    every = recipes.merge(translator, {"model": {"n_layers": 3}})["model"]
    assert sides_of(ModelConfig.from_dict(every)) == (32000, 32000, 3, 3)
    kept = recipes.merge({"model": {"n_layers": 3}}, {"model": {"n_encoder_layers": 1}})["model"]
    assert sides_of(ModelConfig.from_dict(kept))[2:] == (1, 3)


def configured(argv: list[str]) -> ModelConfig:
    """The model config that ``vaswani train ...`` would train (nothing trained)."""
    args = parse(build_parser(), argv)
    return registry.configure(args.task, flags_of(args, registry.get(args.task)), config=args.config).model


def test_a_config_file_with_a_gpts_old_names_is_read(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("model:\n  n_decoder_layers: 3\n  src_vocab_size: 32000\n  n_encoder_layers: 6\n")
    cfg = configured(["train", "lm", "--config", str(old)])
    assert cfg.n_layers == 3 and sides_of(cfg) == (None, None, None, None)
    assert configured(["train", "lm", "--config", str(old), "--layers", "2"]).n_layers == 2
    both = tmp_path / "both.yaml"
    both.write_text("model:\n  n_layers: 2\n  n_decoder_layers: 3\n")
    with pytest.raises(ConfigError, match=rf"{both}: config field 'model.n_layers': 2, but"):
        configured(["train", "lm", "--config", str(both)])


def test_flags_set_the_depth_of_every_stack_or_of_one(tmp_path):
    assert configured(["train", "lm", "--layers", "3"]).n_layers == 3
    assert configured(["train", "lm", "--decoder-layers", "3"]).n_layers == 3
    assert configured(["train", "mlm", "--layers", "3"]).n_layers == 3
    assert sides_of(configured(["train", "translation", "--layers", "3"]))[2:] == (3, 3)
    assert sides_of(configured(["train", "translation", "--encoder-layers", "1"]))[2:] == (1, 2)
    per_stack = tmp_path / "per_stack.yaml"
    per_stack.write_text("model:\n  n_encoder_layers: 1\n  n_decoder_layers: 4\n")
    assert sides_of(configured(["train", "translation", "--config", str(per_stack)]))[2:] == (1, 4)
    # --layers sets every stack, also over a recipe's per-stack values.
    layers = configured(["train", "translation", "--config", str(per_stack), "--layers", "3"])
    assert sides_of(layers)[2:] == (3, 3)


def test_the_model_vocabulary_has_no_flag_and_vocab_size_stays_the_tokenizers():
    args = parse(build_parser(), ["train", "lm", "--vocab-size", "300"])
    assert flags_of(args, registry.get(args.task)) == {"model": {}, "train": {}, "data": {"vocab_size": 300}}


# ---------------------------------------------------------------------------------------------
# The old combined norm values in flags and config files (in Python and run directories: test_blocks.py)


@pytest.mark.parametrize(
    "flags,expected",
    [
        (["--norm", "pre_rmsnorm"], ("rmsnorm", "pre")),
        (["--norm", "rmsnorm", "--norm-placement", "post"], ("rmsnorm", "post")),
        (["--norm-placement", "post"], ("layernorm", "post")),
        (["--preset", "gpt-mini", "--norm", "post_ln"], ("layernorm", "post")),  # the old value sets both
        (["--preset", "gpt-mini", "--norm", "rmsnorm"], ("rmsnorm", "pre")),  # the kind alone keeps pre
        (["--config", "{old}"], ("rmsnorm", "pre")),
        (["--config", "{old}", "--norm", "post_ln"], ("layernorm", "post")),
        (["--config", "{old}", "--norm-placement", "post"], ("rmsnorm", "post")),
    ],
)
def test_norm_flags_and_config_files_old_and_new(tmp_path, flags, expected):
    """``--norm`` takes the kinds and the old combined values, ``--norm-placement`` the placement;
    a YAML file's old value is read too; each source replaces what the one before it set."""
    old = tmp_path / "old.yaml"
    old.write_text("model:\n  norm: pre_rmsnorm\n", encoding="utf-8")
    argv = [flag.replace("{old}", str(old)) for flag in flags]
    args = build_parser().parse_args(["train", "lm", *argv])
    run = registry.configure("lm", flags_of(args, registry.get(args.task)), config=args.config)
    assert (run.model.norm, run.model.norm_placement) == expected


def test_an_old_norm_with_a_contradicting_placement_flag_is_one_error(capsys):
    assert main(["train", "lm", "--norm", "pre_ln", "--norm-placement", "post"]) != 0
    err = capsys.readouterr().err
    assert "model.norm_placement" in err and "pre_ln" in err and "Traceback" not in err


# ---------------------------------------------------------------------------------------------
# Run directories already written


def old_fixture_configs() -> list[str]:
    return sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").is_file())


@pytest.mark.parametrize("task", old_fixture_configs())
def test_an_old_run_directory_reads_the_same_model(task, tmp_path):
    old = json.loads((FIXTURES / task / "config.json").read_text(encoding="utf-8"))["model"]
    folder = RunDir(FIXTURES / task)
    spec = registry.get(task)
    run = folder.read_config(task, spec.data)
    side = {
        "decoder_only": ("tgt_vocab_size", "n_decoder_layers"),
        "encoder_only": ("src_vocab_size", "n_encoder_layers"),
    }
    if old["arch"] in side:
        assert (run.model.vocab_size, run.model.n_layers) == tuple(old[k] for k in side[old["arch"]])
        assert sides_of(run.model) == (None, None, None, None)
    else:
        assert sides_of(run.model) == tuple(old[k] for k in SIDES)
    # The model has the shapes of the saved weights, and loads them (strictly).
    model = spec.model(run)
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    with safe_open(str(folder.weights), "pt") as saved:
        names = list(saved.keys())
        assert {k: tuple(saved.get_slice(k).get_shape()) for k in names} == {k: shapes[k] for k in names}
    folder.load_weights(model)
    # Written again, config.json holds the neutral names and reads as the same config.
    again = RunDir(tmp_path)
    again.write_config(run)
    written = json.loads(again.config_path.read_text(encoding="utf-8"))["model"]
    assert (written["vocab_size"], written["n_layers"]) == (run.model.vocab_size, run.model.n_layers)
    assert again.read_config(task, spec.data) == run
