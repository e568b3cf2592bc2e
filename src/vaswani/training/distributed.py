"""Many processes on torch.distributed: who this process is, its device, the collectives the
trainer needs, and the wrapping of the model (DistributedDataParallel, or FSDP2 with ``fsdp``).

A run of ``W`` processes is started by ``torchrun --nproc-per-node N -m vaswani train ...`` (on one
machine or several) or by ``vaswani train ... --nproc N`` (one machine, :mod:`vaswani.cli.launch`);
both set ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``. The
process group uses NCCL on CUDA and gloo on the CPU; each process takes the GPU of its local rank.

Each optimizer step, every process takes its share of the rows of the same global batches
(:mod:`vaswani.training.batches`) and the gradients are reduced across processes, so that ``W``
processes train the same steps as one with the whole batches. Only the main process (rank 0)
logs, evaluates, shows progress and writes files.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import inspect
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from vaswani.errors import ConfigError
from vaswani.runtime import resolve_device

TIMEOUT = datetime.timedelta(minutes=60)  # a main process evaluating or writing a large checkpoint


@dataclass(frozen=True)
class World:
    """This process's ``rank`` among ``size`` processes (``local_rank`` on its machine)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        """Whether this process logs, evaluates and writes files (rank 0)."""
        return self.rank == 0

    @property
    def many(self) -> bool:
        return self.size > 1


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"environment variable {name}={value!r}: expected an integer") from None


def world() -> World:
    """This process's place: from the process group once it is started, else from torchrun's
    environment variables (one process when they are absent)."""
    if dist.is_available() and dist.is_initialized():
        return World(dist.get_rank(), dist.get_world_size(), _env_int("LOCAL_RANK", 0))
    size = _env_int("WORLD_SIZE", 1)
    return World(_env_int("RANK", 0), size, _env_int("LOCAL_RANK", 0))


def process_device(name: str, place: World) -> torch.device:
    """The device of this process: ``name`` resolved, and under several processes on CUDA the GPU
    of its local rank (``cuda`` or ``auto``; an explicit ``cuda:N`` is kept)."""
    device = resolve_device(name)
    if place.many and device.type == "cuda" and ":" not in name:
        if place.local_rank >= torch.cuda.device_count():
            raise ConfigError(
                f"local rank {place.local_rank} has no GPU: this machine has {torch.cuda.device_count()}; "
                f"start at most that many processes per machine"
            )
        device = torch.device("cuda", place.local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def start(device_name: str) -> tuple[World, torch.device]:
    """Join the process group (once, when several processes run) and return this process's place
    and device."""
    place = world()
    device = process_device(device_name, place)
    if place.many and not dist.is_initialized():
        if device.type == "mps":
            raise ConfigError("device 'mps': several processes need CUDA (NCCL) or the CPU (gloo)")
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=TIMEOUT, device_id=device if backend == "nccl" else None)
    return place, device


def stop(finished: bool = False) -> None:
    """Leave the process group, if this process joined one. ``finished`` (the command ended well
    in every process) waits first for the others at a barrier, so that no process tears down its
    connections while a peer still uses them (gloo then aborts the peer at exit: "terminate called
    without an active exception"); after an error a peer may never come, and nobody waits."""
    if dist.is_available() and dist.is_initialized():
        if finished and dist.get_world_size() > 1:
            dist.barrier()
        dist.destroy_process_group()


def barrier(place: World) -> None:
    if place.many:
        dist.barrier()


def reduced(place: World, values: list[float], device: torch.device, op: str = "sum") -> list[float]:
    """``values`` summed (``op="sum"``) or maximised (``"max"``) over the processes, in float64;
    as they are with one process."""
    if not place.many:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return t.tolist()


def gathered(place: World, value: Any) -> list[Any]:
    """Every process's ``value`` (picklable Python objects of this run's own processes), by rank."""
    if not place.many:
        return [value]
    out: list[Any] = [None] * place.size
    dist.all_gather_object(out, value)
    return out


def from_main(place: World, value: Any) -> Any:
    """The main process's ``value``, on every process."""
    if not place.many:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def wrap(
    model: nn.Module,
    place: World,
    device: torch.device,
    fsdp: bool,
    unused_parameters: bool = False,
    compiler: Callable[[nn.Module], nn.Module] | None = None,
) -> nn.Module:
    """What the training forward runs through: ``model`` itself in one process; under several,
    DistributedDataParallel (the gradients all-reduced in buckets during the backward pass), or
    with ``fsdp`` the model sharded by FSDP2 (``fully_shard`` on each block, then on the whole:
    parameters, gradients and optimizer state split across the processes, gathered per block for
    its forward and backward). DDP's division of the summed gradients by the process count is
    undone by the trainer, which divides by the items of the global batch. ``unused_parameters``:
    the loss leaves some parameters out (a BERT's pooler under masked-LM), which DDP must then
    look for each step. ``compiler`` (``torch.compile`` with its fallback) compiles the model
    inside DDP (so that its trial backward pass needs no reduction) and outside FSDP (whose
    shards it must trace)."""
    if compiler is not None and not (place.many and fsdp):
        model = compiler(model)
    if not place.many:
        return model
    if fsdp:
        from torch.distributed.fsdp import fully_shard

        from vaswani.layers.blocks import Block

        for module in model.modules():
            if isinstance(module, Block):
                fully_shard(module)
        sharded = fully_shard(model)
        return sharded if compiler is None else compiler(sharded)
    from torch.nn.parallel import DistributedDataParallel

    # The models' buffers are constants (position tables): not broadcast before each forward pass
    # (the option's newer name where this torch has it).
    newer = "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
    no_sync = {"forward_sync_buffers" if newer else "broadcast_buffers": False}
    return DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        find_unused_parameters=unused_parameters,
        **no_sync,
    )


@contextlib.contextmanager
def gradient_sync(model: nn.Module, on: bool) -> Iterator[None]:
    """Within, the backward pass reduces gradients across processes only when ``on`` (the last
    micro-batch of an accumulated step); otherwise each process keeps adding to its own."""
    if on:
        yield
    elif hasattr(model, "no_sync"):  # DistributedDataParallel
        with model.no_sync():
            yield
    elif hasattr(model, "set_requires_gradient_sync"):  # FSDP2
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
    else:
        yield


@contextlib.contextmanager
def unsharded(model: nn.Module) -> Iterator[None]:
    """Within, an FSDP2 model's own (root) parameters are whole, so that methods other than its
    forward (a translator's ``encode`` and ``decode``) can use them; its blocks gather theirs in their
    own forward passes. Nothing for a model that is not sharded."""
    if not hasattr(model, "unshard"):
        yield
        return
    model.unshard()
    try:
        yield
    finally:
        model.reshard()


def is_sharded(model: nn.Module) -> bool:
    """Whether ``model``'s parameters are FSDP2 shards (DTensors)."""
    return any(type(p).__name__ == "DTensor" for p in model.parameters())


def local(t: Tensor) -> Tensor:
    """A plain tensor of a DTensor's value (gathered: every process must call it) or ``t``."""
    full = getattr(t, "full_tensor", None)
    return full() if full is not None else t


def whole_optimizer_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``optimizer.state_dict()`` on the CPU, with each sharded (DTensor) state gathered whole: the
    same for any number of processes (every process must call this under FSDP)."""
    saved = optimizer.state_dict()
    state = {
        index: {k: local(v).detach().cpu() if isinstance(v, Tensor) else v for k, v in sorted(entry.items())}
        for index, entry in sorted(saved["state"].items())
    }
    return {"state": state, "param_groups": saved["param_groups"]}


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """Load a whole optimizer state (:func:`whole_optimizer_state`), each state tensor of a
    sharded parameter cut to this process's shard."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    state = {}
    for index, entry in saved["state"].items():
        param = params[index]
        state[index] = {k: _like(v, param) for k, v in sorted(entry.items())}
    optimizer.load_state_dict({"state": state, "param_groups": saved["param_groups"]})


def _like(value: Any, param: Tensor) -> Any:
    """``value`` sharded as ``param`` is, when ``param`` is a DTensor and ``value`` is whole."""
    mesh = getattr(param, "device_mesh", None)
    if mesh is None or not isinstance(value, Tensor) or value.shape != param.shape:
        return value
    from torch.distributed.tensor import distribute_tensor

    return distribute_tensor(value.to(param.dtype), mesh, param.placements)


def same_files(place: World, save_files: Callable[[Path], None]) -> None:
    """Check that every process built the same run files (tokenizers): each writes them into a
    folder of its own and their checksums are compared; a process that built others (data read
    differently) is a one-line :class:`ConfigError`, before anything is trained."""
    if not place.many:
        return
    with tempfile.TemporaryDirectory(prefix="vaswani-rank-") as folder:
        save_files(Path(folder))
        digest = hashlib.sha256()
        for path in sorted(Path(folder).rglob("*")):
            if path.is_file():
                digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    digests = gathered(place, digest.hexdigest())
    others = [rank for rank, d in enumerate(digests) if d != digests[0]]
    if others:
        raise ConfigError(
            f"process {others[0]} built other tokenizers or files than process 0 from the same data: "
            "every process must read the same files"
        )
