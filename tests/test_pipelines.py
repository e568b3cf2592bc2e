"""Every run kind's wrapper is a :class:`~vaswani.pipelines.common.Pipeline`: the command line and the
server type against that protocol, so a wrapper that does not satisfy it must fail here.

The runs of ``tests/fixtures/run_dirs`` (translation, lm, mlm, classify, encoder) are loaded through
the registry, as ``vaswani.load`` does; every registered kind's wrapper class is checked for the
protocol's constructor.
"""

from __future__ import annotations

import inspect

import pytest
from torch import nn

from tests.helpers import copied_run
from vaswani.generation.config import DecodingConfig
from vaswani.pipelines.common import Pipeline
from vaswani.tasks import registry

FIXTURE_KINDS = ("translation", "lm", "mlm", "classify", "encoder")


@pytest.mark.parametrize("spec", registry.ENTRIES, ids=lambda spec: spec.name)
def test_every_run_kind_loads_through_a_classmethod_of_its_wrapper(spec):
    wrapper = getattr(spec.load, "__self__", None)
    assert isinstance(wrapper, type), f"{spec.name}: load is not a classmethod of the wrapper class"
    assert spec.load.__func__ is wrapper.__dict__["load"].__func__
    parameters = list(inspect.signature(spec.load).parameters)
    assert parameters[:2] == ["run_dir", "device"], f"{spec.name}: load{tuple(parameters)}"
    assert inspect.signature(spec.load).parameters["device"].default == "auto"


@pytest.mark.parametrize("task", FIXTURE_KINDS)
def test_a_loaded_run_satisfies_the_pipeline_protocol(task, tmp_path):
    run, _ = copied_run(task, tmp_path)
    wrapper = registry.load(run, device="cpu")
    assert isinstance(wrapper, Pipeline)
    assert isinstance(wrapper.model, nn.Module) and not wrapper.model.training
    assert type(wrapper) is registry.get(task).load.__self__


def test_an_object_without_a_model_is_not_a_pipeline():
    class NoModel:
        @classmethod
        def load(cls, run_dir, device="auto"):
            return cls()

    assert not isinstance(NoModel(), Pipeline)


@pytest.mark.parametrize("task", ["translation", "lm"])
def test_a_model_put_back_in_training_mode_still_decodes_in_eval_mode(task, tmp_path):
    """The wrappers skip ``eval()`` (a walk over every module) where the model is in eval mode
    already, and still switch a model that was put in training mode (dropout on) back."""
    run, _ = copied_run(task, tmp_path)
    wrapper = registry.load(run, device="cpu")
    greedy = DecodingConfig(max_new_tokens=8)

    def decode() -> list[str]:
        if task == "translation":
            return wrapper.translate(["Tom chases Jerry", "a cat sleeps"], greedy)
        return wrapper.generate(["the", "a"], greedy)

    expected = decode()
    wrapper.model.train()
    assert decode() == expected
    assert not any(module.training for module in wrapper.model.modules())
