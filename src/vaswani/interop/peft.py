"""A LoRA run's adapters in PEFT's format (``adapter_config.json``, ``adapter_model.safetensors``),
for ``peft.PeftModel.from_pretrained`` on the Hugging Face export of the run's ``--init`` run.

A LoRA run (``--lora R``, :mod:`vaswani.layers.lora`) keeps its adapters, unmerged, in
``adapter.safetensors``: ``<module>.lora_A`` (r, in) and ``<module>.lora_B`` (out, r) by our module
names. PEFT names the same tensors ``base_model.model.<Hugging Face module>.lora_A.weight`` and
``….lora_B.weight`` and adds (α / r) B A to the module's weight as we do, so the export renames
modules by the family's table (:mod:`~vaswani.interop.gpt2`, :mod:`~vaswani.interop.llama`,
:mod:`~vaswani.interop.bert`, :mod:`~vaswani.interop.marian`) and reshapes nothing but what the
family's weights reshape:

- GPT-2's ``c_attn`` fuses q, k and v as our ``qkv_proj`` does: its B is ours (the rows of the
  untargeted parts at zero), and ``fan_in_fan_out`` says that the ``Conv1D`` weight is stored
  transposed (A and B are not); separate q/k/v projections cannot be written as one ``c_attn``
  adapter of the same rank and are refused;
- Llama's, BERT's and Marian's separate projections take a fused ``qkv_proj``'s B (a
  cross-attention's ``kv_proj``'s) cut into its parts (each with the same A), and a Llama with
  interleaved rotary heads the rows of q's and k's B in the half-split order its export gives the
  weights.

A language model's adapters apply to ``GPT2LMHeadModel`` or ``LlamaForCausalLM``; a BERT
classifier's or tagger's to the encoder as its ``--init`` run exports (``BertModel``, or
``BertForMaskedLM`` with ``bert.`` names for an ``mlm`` run); a translation run's to ``MarianMTModel``;
a new head trained in full is no part
of the Hugging Face model and is left out (the run's ``model.safetensors`` has it).
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor

from vaswani.config import ROTARY, ModelConfig, RunConfig
from vaswani.errors import ConfigError, RunDirError
from vaswani.interop import bert, gpt2, llama, marian
from vaswani.interop.common import new_folder, write_json, write_safetensors
from vaswani.layers.positions import halves_order
from vaswani.rundir import RunDir
from vaswani.tasks import registry

CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
PARTS = ("q_proj", "k_proj", "v_proj")
BODIES = ("bert.", "gpt.")  # a classifier's or tagger's pretrained model, under its own name
TASK_TYPES = {"lm": "CAUSAL_LM", "translation": "SEQ_2_SEQ_LM"}  # PEFT's model class of each task


def family_of(cfg: ModelConfig) -> str:
    """The Hugging Face family whose names the adapters of a model of ``cfg`` take."""
    if cfg.arch == "encoder_only":
        return bert.MODEL_TYPE
    if cfg.arch == "decoder_only":
        return llama.MODEL_TYPE if cfg.position in ROTARY else gpt2.MODEL_TYPE
    return marian.MODEL_TYPE


def module_table(family: str, cfg: ModelConfig, hf_prefix: str = "") -> dict[str, str]:
    """Our module names (inside the model of an lm run or a ``bert`` encoder) → the Hugging Face
    modules of ``family``, for every layer of ``cfg``."""
    if family == marian.MODEL_TYPE:
        stacks = (("encoder", marian.ENCODER_MODULES, cfg.n_encoder_layers),
                  ("decoder", marian.DECODER_MODULES, cfg.n_decoder_layers))  # fmt: skip
        return {
            f"{stack}.layers.{i}.{ours}": f"model.{stack}.layers.{i}.{hf}"
            for stack, modules, n_layers in stacks
            for i in range(n_layers)
            for hf, ours in modules.items()
        }
    if family == gpt2.MODEL_TYPE:
        layer = {ours: f"transformer.h.{{i}}.{hf}" for hf, (ours, _) in gpt2.LAYER_MODULES.items()}
    elif family == llama.MODEL_TYPE:
        layer = {ours: f"model.layers.{{i}}.{hf}" for hf, ours in llama.PROJECTIONS}
    else:
        layer = {ours: f"{hf_prefix}encoder.layer.{{i}}.{hf}" for hf, ours in bert.LAYER_MODULES.items()}
    n_layers = cfg.n_layers
    return {
        f"blocks.layers.{i}.{ours}": hf.format(i=i) for i in range(n_layers) for ours, hf in layer.items()
    }


def _pieces(
    name: str, lora_b: Tensor, table: dict[str, str], cfg: ModelConfig, targets: tuple[str, ...]
) -> list[tuple[str, str, Tensor]]:
    """(our module, Hugging Face module, its B) for the adapter of our module ``name``: itself, or
    the targeted parts of a fused ``qkv_proj`` (or a cross-attention's ``kv_proj``) that the
    family keeps apart."""
    if name in table:
        return [(name, table[name], lora_b)]
    d_kv = (cfg.n_kv_heads or cfg.n_heads) * (cfg.d_model // cfg.n_heads)
    if name.endswith(".qkv_proj"):
        names, sizes = PARTS, [cfg.d_model, d_kv, d_kv]
    elif name.endswith(".kv_proj"):
        names, sizes = PARTS[1:], [d_kv, d_kv]
    else:
        raise ConfigError(f"export-peft: the adapted module {name!r} has no Hugging Face counterpart")
    stem = name.rsplit(".", 1)[0] + "."
    parts = zip(names, lora_b.split(sizes), strict=True)
    return [(stem + part, table[stem + part], b) for part, b in parts if part in targets]


def _hf_rows(family: str, cfg: ModelConfig, ours: str, lora_b: Tensor) -> Tensor:
    """B in the row order of the family's weight: Llama's interleaved rotary q and k reordered."""
    if (
        family == llama.MODEL_TYPE
        and cfg.position == "rope_interleaved"
        and ours.endswith(("q_proj", "k_proj"))
    ):
        heads = cfg.n_heads if ours.endswith("q_proj") else cfg.n_kv_heads or cfg.n_heads
        return lora_b[llama.half_split_order(cfg, heads)]
    return lora_b


def _halves(cfg: ModelConfig, ours: str, lora_a: Tensor, lora_b: Tensor) -> tuple[Tensor, Tensor]:
    """A and B of a translation model with the paper's interleaved positions, as its Marian export
    permutes the model dimension (:func:`~vaswani.interop.marian_folder.state_to_hf`): the columns
    of A where the module reads the residual stream, the rows of B where it writes into it."""
    if cfg.arch != "encoder_decoder" or cfg.position != "sinusoidal":
        return lora_a, lora_b
    order = halves_order(cfg.d_model)
    if ours.endswith(("out_proj", "linear2")):
        return lora_a, lora_b[order, :]
    return lora_a[:, order], lora_b


def _init_is_mlm(run: RunConfig) -> bool:
    """Whether the run's ``--init`` run is an ``mlm`` run (exported as ``BertForMaskedLM``)."""
    init = getattr(run.data, "init", None)
    if init is None or not (Path(init) / RunDir.CONFIG).is_file():
        return False
    return RunDir(init).read_config().task == "mlm"


def peft_adapter(run_dir: Path, run: RunConfig) -> tuple[dict[str, Tensor], dict[str, object], list[str]]:
    """The adapters of the LoRA run ``run_dir`` by PEFT's names, PEFT's ``adapter_config.json``, and
    the names of the trained tensors left out (a new head, which the Hugging Face model lacks)."""
    train = run.train
    path = run_dir / RunDir.ADAPTER
    if train.lora_rank is None or not path.is_file():
        raise RunDirError(f"{run_dir}: not a LoRA run (no {RunDir.ADAPTER}); train one with --lora R")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError) as exc:
        raise RunDirError(f"{path}: not a readable safetensors file ({exc})") from None
    family = family_of(run.model)
    prefix = "bert." if family == bert.MODEL_TYPE and _init_is_mlm(run) else ""
    table = module_table(family, run.model, prefix)
    if family == gpt2.MODEL_TYPE and not run.model.fused_qkv and set(PARTS) & set(train.lora_targets):
        raise ConfigError(
            "export-peft: GPT-2's c_attn fuses q, k and v; adapters of separate q/k/v projections "
            "do not make one c_attn adapter of the same rank (train with --fused-qkv)"
        )
    out: dict[str, Tensor] = {}
    for key in sorted(k for k in tensors if k.endswith(".lora_A")):
        name = key.removesuffix(".lora_A")
        inner = next((name.removeprefix(b) for b in BODIES if name.startswith(b)), name)
        for ours, hf, lora_b in _pieces(
            inner, tensors[f"{name}.lora_B"], table, run.model, train.lora_targets
        ):
            lora_a, lora_b = _halves(run.model, ours, tensors[key], lora_b)
            out[f"base_model.model.{hf}.lora_A.weight"] = lora_a.clone()  # one A per module, unshared
            out[f"base_model.model.{hf}.lora_B.weight"] = _hf_rows(
                family, run.model, ours, lora_b
            ).contiguous()
    modules = sorted({k.removeprefix("base_model.model.").rsplit(".lora_", 1)[0] for k in out})
    config = {
        "peft_type": "LORA",
        "task_type": TASK_TYPES.get(run.task),
        "base_model_name_or_path": getattr(run.data, "init", None),
        "r": train.lora_rank,
        "lora_alpha": train.lora_alpha,
        "lora_dropout": train.lora_dropout,
        "target_modules": modules,
        "fan_in_fan_out": family == gpt2.MODEL_TYPE,
        "bias": "none",
        "modules_to_save": None,
        "init_lora_weights": True,
        "use_rslora": False,
        "inference_mode": True,
    }
    left_out = sorted(k for k in tensors if not k.endswith((".lora_A", ".lora_B")))
    return out, config, left_out


def export_peft(run_dir: Path, out: Path) -> list[str]:
    """Write the adapters of the LoRA run ``run_dir`` into the folder ``out`` (new or empty; it
    appears complete or not at all) in PEFT's format; return the names of the trained tensors
    left out (a new head)."""
    run_dir, out = Path(run_dir), Path(out)
    task = RunDir(run_dir).read_config().task
    spec = registry.TASKS.get(task)
    run = RunDir(run_dir).read_config(task, spec.data if spec is not None else None)
    tensors, config, left_out = peft_adapter(run_dir, run)
    with new_folder(out) as tmp:
        write_json(tmp / CONFIG, config)
        write_safetensors(tmp / WEIGHTS, {k: v.to(torch.float32) for k, v in tensors.items()})
    return left_out
