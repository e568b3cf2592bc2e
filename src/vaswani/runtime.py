"""What the machine offers and how a run uses it: bf16 support, seeding, threads.

(The device joins these in a later change.)
"""

from __future__ import annotations

import torch


def native_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX), where bf16 autocast trains
    several times faster than fp32 (a private torch helper, absent from some builds: False then)."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)
