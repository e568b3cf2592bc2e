"""The numeric precision of training: autocast, and for fp16 the gradient scaler.

- ``fp32``: no autocast.
- ``bf16``: ``torch.autocast(device, bfloat16)`` on the CPU and on GPUs. bf16 has fp32's exponent
  range, so gradients need no scaling.
- ``fp16``: ``torch.autocast(device, float16)`` with a :class:`torch.amp.GradScaler`: the loss is
  multiplied by a scale S before the backward pass, the gradients divided by S before clipping and
  the update; a step whose gradients overflowed is skipped and S halved (every 2000 good steps it
  doubles). CUDA only: elsewhere fp16 is refused in one line.

``tf32`` lets CUDA's fp32 matmuls and convolutions run on TF32 tensor cores (fp32 range, a 10-bit
mantissa in the products); it does nothing on other devices.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import Tensor

from vaswani.errors import ConfigError

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
FP16_DEVICES = ("cuda",)  # where fp16 trains (with the scaler)
INIT_SCALE = 2.0**16  # the scaler's first loss scale (torch's default)


class Precision:
    """Autocast and loss scaling for ``precision`` (``fp32``, ``bf16``, ``fp16``) on ``device``."""

    def __init__(self, precision: str, device: torch.device, tf32: bool = False) -> None:
        if precision == "fp16" and device.type not in FP16_DEVICES:
            raise ConfigError(
                f"config field 'train.precision': fp16 trains on CUDA only (with a gradient scaler), "
                f"not on {device.type}; use bf16 or fp32"
            )
        self.name = precision
        self.device = device
        self.dtype = DTYPES.get(precision)
        self.scaler = (
            torch.amp.GradScaler(device.type, init_scale=INIT_SCALE) if precision == "fp16" else None
        )
        if device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The forward pass's context: autocast to bf16 or fp16, or nothing for fp32."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def backward(self, loss: Tensor) -> None:
        """``loss.backward()``, of the scaled loss under fp16."""
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide the gradients by the scale (fp16), so that clipping and the update see true ones."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer's update (the scaler's, which updates its scale, under fp16)."""
        if self.scaler is None:
            optimizer.step()
        else:
            self.scaler.step(optimizer)
            self.scaler.update()

    def overflowed(self) -> bool:
        """After :meth:`unscale` found non-finite gradients: whether that is the scaler's normal
        overflow (fp16: the scale is lowered and the step skipped, not counted as a bad step)."""
        if self.scaler is None:
            return False
        self.scaler.update()
        return True

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps: the scaler's scale and counters (empty without a scaler)."""
        return {} if self.scaler is None else self.scaler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)
