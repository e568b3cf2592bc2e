"""Training through ``torch.compile``, falling back to eager where compilation does not work.

``torch.compile`` fails lazily: at the first call (no C++ compiler for inductor's CPU kernels, no
Triton for its GPU kernels, an operation dynamo cannot trace, a backend error) or at the first
backward pass (inductor compiles the backward graph then). :func:`compile_for_training` checks up
front what is cheap to check (dynamo's platform and Python version, inductor's compiler for the
model's device), and the module it returns compiles the forward and the backward graph at its first
call (a trial pass, once); on any failure it prints one line to stderr and runs the eager model
from then on.

Shapes are marked dynamic (``dynamic=True``): token-budget batches vary in rows and length, and a
shape-specialised graph would recompile at each new batch shape.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._pytree import tree_leaves

from vaswani.errors import VaswaniError
from vaswani.runtime import CompileBackend, compile_failure, compile_unsupported
from vaswani.training.distributed import world

Backend = CompileBackend
BACKEND: Backend = "inductor"  # what the trainer compiles with


def compile_for_training(model: nn.Module, backend: Backend | None = None, dynamic: bool = True) -> nn.Module:
    """``model`` trained through ``torch.compile`` (:class:`CompiledModel`, the same parameters: the
    optimizer, checkpoints and evaluation keep using ``model``), or ``model`` itself, after one line
    on stderr, where a cheap check shows that ``backend`` (default :data:`BACKEND`) cannot work here."""
    backend = BACKEND if backend is None else backend
    reason = unsupported_reason(model, backend)
    if reason is not None:
        say_fallback(reason)
        return model
    return CompiledModel(model, backend, dynamic)


def unsupported_reason(model: nn.Module, backend: Backend) -> str | None:
    """Why ``backend`` cannot compile ``model`` on this machine, as far as a cheap check tells
    (:func:`vaswani.runtime.compile_unsupported` for the device of its parameters); None where it may."""
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    return compile_unsupported(device, backend)


class CompiledModel(nn.Module):
    """``model`` run through ``torch.compile(model, backend=..., dynamic=...)`` while that works.

    The first call with gradients on first runs a trial forward and backward pass through the
    compiled model (its gradients discarded, the random generators restored after it), so that a
    failure to compile the backward graph shows here too; after a failure, one line on stderr and
    the eager ``model`` for good. The outputs are those of ``model``."""

    def __init__(self, model: nn.Module, backend: Backend, dynamic: bool) -> None:
        super().__init__()
        self.model = model
        # a plain list: the compiled wrapper holds ``model`` again, and must not show as a submodule
        self.compiled: list[Callable[..., Any]] = [torch.compile(model, backend=backend, dynamic=dynamic)]
        self.tried_backward = False

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not self.compiled:
            return self.model(*args, **kwargs)
        try:
            if not self.tried_backward and torch.is_grad_enabled():
                self._try_backward(args, kwargs)
            return self.compiled[0](*args, **kwargs)
        except (VaswaniError, torch.OutOfMemoryError):
            raise
        except Exception as exc:  # whatever dynamo, AOTAutograd or a backend raised
            self.compiled.clear()
            say_fallback(compile_failure(exc))
            return self.model(*args, **kwargs)

    def _try_backward(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A forward and backward pass through the compiled model on these inputs (the gradients
        of a sum of the outputs, discarded), which compiles both graphs."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        devices = sorted({p.device.index or 0 for p in params if p.device.type == "cuda"})
        with torch.random.fork_rng(devices=devices):
            out = self.compiled[0](*args, **kwargs)
            leaves = [t for t in tree_leaves(out) if isinstance(t, Tensor) and t.requires_grad]
            if leaves and params:
                total = torch.stack([t.float().sum() for t in leaves]).sum()
                torch.autograd.grad(total, params, allow_unused=True)
        self.tried_backward = True


def say_fallback(reason: str) -> None:
    """The one line that says training goes on without ``torch.compile``, and why (from the main
    process only, of several)."""
    if not world().main:
        return
    print(
        f"vaswani: --compile: torch.compile does not work here ({reason}); training without it",
        file=sys.stderr,
    )
