"""``--compile``: where ``torch.compile`` fails (in the forward graph, in the backward graph, or by
a cheap check up front) training goes on eagerly after one line on stderr, never retrying, with
the parameters shared; where inductor works here, compiled training steps give eager's losses."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch._dynamo.backends.common import aot_autograd

from tests.helpers import tiny_lm_args, write_lm_text
from vaswani.cli import main
from vaswani.config import ModelConfig
from vaswani.models.gpt import GPT
from vaswani.training import compilation
from vaswani.training.compilation import CompiledModel, compile_for_training, unsupported_reason

FALLBACK = "vaswani: --compile: torch.compile does not work here ("
VOCAB = 40


def _gpt(dropout: float = 0.0) -> GPT:
    torch.manual_seed(0)
    cfg = ModelConfig.preset(
        "gpt-mini", src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=32, n_heads=2, d_ff=64, n_layers=2,
        max_len=32, dropout=dropout,
    )  # fmt: skip
    return GPT(cfg)


def _ids(step: int) -> torch.Tensor:
    """Batches of varying shape (token-budget batches do vary): (rows, 1 + length)."""
    rows, length = [(2, 16), (3, 20), (4, 12), (2, 31)][step % 4]
    return torch.randint(0, VOCAB, (rows, length + 1), generator=torch.Generator().manual_seed(step))


def _losses(model: torch.nn.Module, params: torch.nn.Module, steps: int) -> list[float]:
    """``steps`` SGD steps of next-token loss through ``model`` on ``params``' parameters."""
    torch.manual_seed(1)  # the dropout masks
    optimizer = torch.optim.SGD(params.parameters(), lr=0.5)
    out = []
    for step in range(steps):
        ids = _ids(step)
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        out.append(loss.item())
    return out


def _raising_backend(calls: list[int]):
    def backend(gm, example_inputs):
        calls.append(1)
        raise RuntimeError("no kernels today\nsecond line")

    return backend


def _failing_backward_backend(calls: list[int]):
    def bw_compiler(gm, example_inputs):
        calls.append(1)
        raise RuntimeError("backward cannot be compiled")

    return aot_autograd(fw_compiler=lambda gm, example_inputs: gm, bw_compiler=bw_compiler)


@pytest.mark.parametrize("make_backend", [_raising_backend, _failing_backward_backend])
def test_a_failing_compilation_trains_on_eagerly_after_one_line(capsys, make_backend):
    eager, model = _gpt(dropout=0.1), _gpt(dropout=0.1)
    calls: list[int] = []
    compiled = compile_for_training(model, backend=make_backend(calls))
    assert isinstance(compiled, CompiledModel)
    assert all(a is b for a, b in zip(compiled.parameters(), model.parameters(), strict=True))
    assert _losses(compiled, model, 4) == _losses(eager, eager, 4)  # the RNG untouched by the trial
    said = [line for line in capsys.readouterr().err.splitlines() if FALLBACK in line]
    assert len(said) == 1
    assert said[0] in (
        f"{FALLBACK}RuntimeError: no kernels today); training without it",
        f"{FALLBACK}RuntimeError: backward cannot be compiled); training without it",
    )
    tried = len(calls)
    compiled(_ids(5)[:, :-1]).sum().backward()  # a new shape: still eager
    assert tried > 0 and len(calls) == tried  # never retried
    for a, b in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_missing_cpp_compiler_is_found_up_front_without_compiling(monkeypatch, capsys):
    from torch._inductor import cpp_builder

    def none_found() -> str:
        raise RuntimeError("No working C++ compiler found")

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", none_found)
    monkeypatch.setattr(torch, "compile", lambda *a, **k: pytest.fail("compiled despite the check"))
    model = _gpt()
    assert compile_for_training(model) is model
    assert capsys.readouterr().err == (
        f"{FALLBACK}inductor finds no C++ compiler for the CPU: RuntimeError: No working C++ compiler "
        "found); training without it\n"
    )


def test_an_unsupported_platform_is_found_up_front(monkeypatch):
    monkeypatch.setattr(torch._dynamo, "is_dynamo_supported", lambda: False)
    assert "dynamo does not support Python" in str(unsupported_reason(_gpt(), "eager"))


def test_the_trial_pass_is_only_taken_with_gradients(monkeypatch):
    calls: list[int] = []
    compiled = compile_for_training(_gpt(), backend=_failing_backward_backend(calls))
    with torch.no_grad():
        compiled(_ids(0)[:, :-1])
    assert calls == [] and compiled.compiled  # no backward compiled yet, nothing failed


def test_vaswani_train_compile_falls_back_through_the_trainer(tmp_path, monkeypatch, capsys):
    text = write_lm_text(tmp_path / "train.txt")
    args = ("--max-steps", "8", "--dropout", "0.1")
    assert main(tiny_lm_args(text, tmp_path / "eager", *args)) == 0
    monkeypatch.setattr(compilation, "BACKEND", _raising_backend([]))
    capsys.readouterr()
    assert main(tiny_lm_args(text, tmp_path / "compiled", *args, "--compile")) == 0
    assert capsys.readouterr().err.count(FALLBACK) == 1
    eager, compiled = (load_file(tmp_path / name / "model.safetensors") for name in ("eager", "compiled"))
    assert all(torch.equal(eager[k], compiled[k]) for k in eager)


inductor = pytest.mark.skipif(
    unsupported_reason(_gpt(), "inductor") is not None, reason="inductor cannot compile here"
)


@pytest.mark.slow
@inductor
def test_inductor_compiled_steps_give_eager_losses(capsys):
    """fp32 on the CPU: inductor fuses and reorders the sums of the same operations, so the losses
    differ from eager's in the last bits only; 1e-4 relative over 6 steps of batches of varying
    shape (the updates compound the differences) is far below any real difference."""
    eager, model = _gpt(), _gpt()
    compiled = compile_for_training(model)
    assert _losses(compiled, model, 6) == pytest.approx(_losses(eager, eager, 6), rel=1e-4)
    assert FALLBACK not in capsys.readouterr().err


@pytest.mark.slow
@inductor
def test_vaswani_train_lm_compile_runs(tmp_path, capsys):
    text = write_lm_text(tmp_path / "train.txt")
    assert main(tiny_lm_args(text, tmp_path / "run", "--max-steps", "5", "--compile")) == 0
    assert FALLBACK not in capsys.readouterr().err
    assert (tmp_path / "run" / "model.safetensors").exists()
