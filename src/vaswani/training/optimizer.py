"""The optimizer every task trains with: Adam or AdamW, weight decay on the matrices only."""

from __future__ import annotations

import torch
from torch import nn

from vaswani.config import TrainConfig


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam or AdamW; weight decay applies to matrices only, never to biases, norms or
    (1-d) gains."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    kind = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    sharded = any(hasattr(p, "device_mesh") for p in params)  # FSDP's DTensors: the foreach kernels
    fused = not sharded and all(p.device.type in ("cpu", "cuda") for p in params)
    return kind(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, fused=fused)
