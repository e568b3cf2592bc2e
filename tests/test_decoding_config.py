"""DecodingConfig: the strategy derived from the fields, one-line errors that name the field (or,
from the CLI, the flag), the flags of translate/generate/evaluate read into the same config that
the Python API takes, and the output budget."""

from __future__ import annotations

import math

import pytest
import torch

from vaswani.cli import build_parser
from vaswani.cli.decoding import decoding_from_args
from vaswani.config import ModelConfig
from vaswani.errors import ConfigError
from vaswani.generation.config import DecodingConfig, describe_decoding
from vaswani.generation.lm import lm_budget
from vaswani.generation.seq2seq import translate_beam_ids, translate_ids
from vaswani.models.transformer import Transformer


@pytest.mark.parametrize(
    "fields,strategy",
    [({}, "greedy"), ({"beam": 4}, "beam"), ({"top_k": 5}, "sample"), ({"temperature": 0.0}, "sample"),
     ({"top_p": 0.9, "seed": 3}, "sample"), ({"strategy": "beam"}, "beam"), ({"n_best": 1}, "greedy")],
)  # fmt: skip
def test_the_strategy_is_derived_from_the_fields(fields, strategy):
    assert DecodingConfig(**fields).strategy == strategy


def test_unset_beam_options_take_the_papers_defaults():
    penalty = DecodingConfig(beam=4).penalty
    assert (penalty.kind, penalty.alpha) == ("gnmt", 0.6)
    assert DecodingConfig(beam=4).stopping is True
    given = DecodingConfig(beam=4, length_penalty=1.5, length_penalty_kind="simple", early_stopping="never")
    assert (given.penalty.kind, given.penalty.alpha, given.stopping) == ("simple", 1.5, "never")
    assert DecodingConfig(stop="\n").stop == ("\n",) and DecodingConfig(stop=["a", "b"]).stop == ("a", "b")


BAD = [
    ({"strategy": "nucleus"}, "decoding.strategy", "'nucleus'"),
    ({"beam": 0}, "decoding.beam", ">= 1, got 0"),
    ({"beam": 2.5}, "decoding.beam", "integer"),
    ({"strategy": "greedy", "beam": 3}, "decoding.beam", "'greedy'"),
    ({"beam": 2, "n_best": 3}, "decoding.n_best", "decoding.beam (2)"),
    ({"beam": 2, "top_k": 5}, "beam search and sampling", "decoding.temperature"),
    ({"strategy": "beam", "temperature": 1.0}, "decoding.temperature", "'beam'"),
    ({"beam": 2, "length_penalty": math.nan}, "decoding.length_penalty", "finite"),
    ({"beam": 2, "length_penalty_kind": "wu"}, "decoding.length_penalty_kind", "gnmt, simple, none"),
    ({"length_penalty": 1.0}, "decoding.length_penalty", "beam search"),
    ({"length_penalty_kind": "simple"}, "decoding.length_penalty_kind", "beam search"),
    ({"early_stopping": "never"}, "decoding.early_stopping", "beam search"),
    ({"beam": 2, "early_stopping": "sometimes"}, "decoding.early_stopping", "'never'"),
    ({"beam": 2, "early_stopping": 1}, "decoding.early_stopping", "got 1"),
    ({"temperature": -0.5}, "decoding.temperature", ">= 0"),
    ({"top_k": 0}, "decoding.top_k", ">= 1"),
    ({"top_p": 0.0}, "decoding.top_p", "(0, 1]"),
    ({"seed": 1}, "decoding.seed", "sampling"),
    ({"max_new_tokens": 0}, "decoding.max_new_tokens", ">= 1"),
    ({"max_new_tokens": 5, "max_len_b": 3}, "decoding.max_new_tokens", "decoding.max_len_b"),
    ({"max_len_a": -1.0}, "decoding.max_len_a", ">= 0"),
    ({"max_len_b": 1.5}, "decoding.max_len_b", "integer"),
    ({"stop": ("ok", 3)}, "decoding.stop", "strings"),
]


@pytest.mark.parametrize("fields,first,second", BAD, ids=[str(fields) for fields, _, _ in BAD])
def test_a_bad_config_is_refused_in_one_line_naming_the_field(fields, first, second):
    with pytest.raises(ConfigError) as caught:
        DecodingConfig(**fields)
    message = str(caught.value)
    assert type(caught.value) is ConfigError and "\n" not in message
    assert first in message and second in message, message


def _args(*argv: str):
    return build_parser().parse_args(list(argv))


def test_the_flags_of_each_command_are_the_config_the_api_takes():
    translate = _args(
        "translate", "RUN", "--beam", "3", "--n-best", "2", "--length-penalty-kind", "simple",
        "--length-penalty", "1.0", "--early-stopping", "never", "--max-new-tokens", "7",
    )  # fmt: skip
    assert decoding_from_args(translate) == DecodingConfig(
        beam=3, n_best=2, length_penalty_kind="simple", length_penalty=1.0, early_stopping="never",
        max_new_tokens=7,
    )  # fmt: skip
    for text, rule in (("true", True), ("false", False), ("never", "never")):
        args = _args("evaluate", "RUN", "--beam", "2", "--early-stopping", text)
        assert decoding_from_args(args) == DecodingConfig(beam=2, early_stopping=rule)
    sampled = _args("translate", "RUN", "--top-p", "0.9", "--seed", "4")
    assert decoding_from_args(sampled) == DecodingConfig(top_p=0.9, seed=4)
    assert decoding_from_args(_args("translate", "RUN")) == DecodingConfig()
    generate = _args("generate", "RUN", "a", "--top-k", "5", "--seed", "1", "--stop", "x", "--stop", "y")
    assert decoding_from_args(generate) == DecodingConfig(
        temperature=1.0, top_k=5, seed=1, stop=("x", "y"), max_new_tokens=200
    )


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["translate", "RUN", "--max-new-tokens", "0"], "--max-new-tokens must be >= 1, got 0"),
        (["translate", "RUN", "--early-stopping", "never"],
         "--early-stopping applies to beam search: set --beam > 1"),
        (["translate", "RUN", "--beam", "2", "--temperature", "0.5"],
         "beam search and sampling do not go together: give --beam or --temperature/--top-k/--top-p"),
        (["evaluate", "RUN", "--beam", "2", "--n-best", "3"], None),
        (["generate", "RUN", "a", "--temperature", "-1"], "--temperature must be >= 0, got -1.0"),
    ],
)  # fmt: skip
def test_cli_errors_name_the_flags(argv, expected):
    if expected is None:  # evaluate has no --n-best
        with pytest.raises(SystemExit):
            _args(*argv)
        return
    with pytest.raises(ConfigError) as caught:
        decoding_from_args(_args(*argv))
    assert str(caught.value) == expected


def test_n_best_lists_are_not_sampled(tmp_path, capsys):
    """Refused before the run is read (there is none here)."""
    from vaswani.cli import main

    assert main(["translate", str(tmp_path / "none"), "a", "--n-best", "1", "--top-k", "3"]) == 2
    assert "--n-best lists come from beam search" in capsys.readouterr().err


def test_descriptions_for_reports():
    assert describe_decoding(DecodingConfig()) == "greedy"
    assert describe_decoding(DecodingConfig(beam=4)) == "beam 4, gnmt length penalty 0.6"
    assert (
        describe_decoding(DecodingConfig(beam=2, length_penalty_kind="none")) == "beam 2, no length penalty"
    )
    never = DecodingConfig(beam=5, length_penalty_kind="simple", length_penalty=1.0, early_stopping="never")
    assert describe_decoding(never) == "beam 5, simple length penalty 1, early stopping never"
    assert (
        describe_decoding(DecodingConfig(temperature=0.8, top_k=50)) == "sampling, temperature 0.8, top_k 50"
    )


def test_the_target_budget():
    """Default floor(2·|x| + 10), or max_new_tokens, or floor(a·|x| + b); always in [1, max_len − 1]."""
    lengths = torch.arange(0, 40)
    reference = [min(max(1, math.floor(2.0 * n + 10)), 31) for n in range(40)]
    assert DecodingConfig().target_budget(lengths, max_len=32).tolist() == reference
    assert DecodingConfig(max_new_tokens=12).target_budget(lengths, 32).tolist() == [12] * 40
    assert DecodingConfig(max_new_tokens=50).target_budget(lengths, 32).tolist() == [31] * 40
    relative = DecodingConfig(max_len_a=0.5, max_len_b=0).target_budget(lengths, 32).tolist()
    assert relative == [min(max(1, n // 2), 31) for n in range(40)]


def _model(max_len: int = 32) -> Transformer:
    cfg = ModelConfig(
        src_vocab_size=16, tgt_vocab_size=16, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1,
        n_decoder_layers=1, max_len=max_len, pad_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    return Transformer(cfg).eval()


def test_each_sentence_gets_its_own_budget():
    """Sources of 3 and 8 tokens (padded with the model's pad_id 0), an EOS that never comes: by
    default the rows get 2·3 + 10 = 16 and 2·8 + 10 = 26 tokens, then padding; greedy and beam."""
    never = 16
    src = torch.tensor([[5, 6, 7, 0, 0, 0, 0, 0], [5, 6, 7, 8, 9, 10, 11, 12]])
    greedy = translate_ids(_model(), src, 1, never).tokens
    assert greedy.shape == (2, 26) and (greedy[0, 16:] == 0).all() and (greedy[0, :16] != 0).all()
    beams = translate_beam_ids(_model(), src, 1, never, DecodingConfig(beam=2, n_best=2))
    assert beams.lengths.tolist() == [[16, 16], [26, 26]]
    capped = translate_ids(_model(max_len=20), src, 1, never, DecodingConfig(max_new_tokens=25)).tokens
    assert capped.shape == (2, 19)  # at most max_len - 1


def test_the_seed_gives_the_same_generator():
    draws = [torch.rand(5, generator=DecodingConfig(top_k=3, seed=7).generator()) for _ in range(2)]
    assert torch.equal(*draws)
    assert DecodingConfig(top_k=3).generator() is None


def test_drivers_refuse_what_they_do_not_do():
    model, src = _model(), torch.tensor([[5, 6, 7]])
    with pytest.raises(ConfigError, match=r"decoding\.stop"):
        translate_ids(model, src, 1, 2, DecodingConfig(stop=("x",)))
    with pytest.raises(ConfigError, match="beam search and sampling"):
        translate_beam_ids(model, src, 1, 2, DecodingConfig(top_k=3))
    with pytest.raises(ConfigError, match=r"decoding\.beam"):
        lm_budget(DecodingConfig(beam=2))
    with pytest.raises(ConfigError, match=r"decoding\.max_len_a"):
        lm_budget(DecodingConfig(max_len_a=1.0))
    assert lm_budget(DecodingConfig()) == 100 and lm_budget(DecodingConfig(max_new_tokens=7)) == 7
