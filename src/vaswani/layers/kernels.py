"""Machine tuning, kept out of the equations: which kernel computes a layer on this machine.

Each choice is one function of the tensors at hand, with what was measured to make it; the
layers compute the same thing whichever kernel is chosen (tests check that the paths agree).
The figures are in ``benchmarks/README.md``, measured on 2 CPU cores with torch 2.13.

- Attention: ``scaled_dot_product_attention`` (SDPA) or the explicit softmax path
  (:func:`explicit_attention_is_faster`); grouped key/value heads given to SDPA as they are or
  expanded to every query head first (:func:`sdpa_takes_grouped_heads`).
- Projections: oneDNN's linear with a fused activation, ``torch.ops.mkldnn._linear_pointwise``,
  or ``F.linear`` then the activation (:func:`onednn_applies`, :func:`onednn_linear`; ``F.linear``
  for products too small to pay for oneDNN's call, :func:`small_product`). The op is
  private to torch: where it is missing, or where a call to it fails once, every projection takes
  ``F.linear`` from then on. Inside ``torch.compile`` (compiled decoding) ``F.linear``, whose GEMM
  inductor chooses itself, except where MKL skips AVX-512: there oneDNN's product as one custom op
  (:func:`onednn_compiles`).
- int8 layers (``--quantize int8``): the activations quantized row by row and multiplied by the
  int8 weights with int32 sums, ``torch._int_mm`` (:func:`int8_rows_apply`), else the weight-only
  ``_weight_int8pack_mm`` or the weight dequantized (``layers/quantize.py``).
- Training's projections: the same oneDNN linear for the forward product and both backward ones,
  or ``F.linear`` and its autograd (MKL's GEMM) (:func:`onednn_trains`, :func:`onednn_train_linear`),
  where MKL runs its AVX2 kernels on a CPU with AVX-512 (one not made by Intel).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.torch_version import TorchVersion

from vaswani.io import first_line
from vaswani.resources import is_out_of_memory


def explicit_attention_is_faster(q: Tensor) -> bool:
    """Whether the explicit path (``softmax(Q Kᵀ / sqrt(d_head)) V`` as matrix products) is faster
    than SDPA for the queries ``q`` (batch, heads, q_len, d_head), on the CPU:

    - Half-precision training: SDPA's CPU flash kernel has a slow backward in bf16 and fp16 (8 ms
      per (64, 4, 20, 64) call, 7x its fp32 time); the explicit path made a bf16 training step
      1.25x faster (``torch.profiler`` on the model of ``benchmarks/translation_speed.py``:
      "What profiling found" in ``benchmarks/README.md``).
    - Decoding steps of many rows in float32 inference (at most 8 queries a row, batch · heads >=
      256: one new token per row, or a source's beam hypotheses together): two small matrix
      products beat the flash kernel, by about 6% of beam-search time
      (``benchmarks/marian_speed.py``). For a few rows (batch-1 generation) SDPA stays faster,
      8 against 18 µs a call.
    """
    if q.device.type != "cpu":
        return False
    if q.requires_grad:
        return q.dtype in (torch.bfloat16, torch.float16)
    batch, heads, q_len = q.shape[:3]
    return q.dtype == torch.float32 and q_len <= 8 and batch * heads >= 256


SDPA_HAS_GQA = TorchVersion(torch.__version__) >= (2, 5)
"""Whether this torch's ``scaled_dot_product_attention`` takes ``enable_gqa`` (added in 2.5)."""


def sdpa_takes_grouped_heads(q: Tensor, masked: bool) -> bool:
    """Whether SDPA should get grouped-query attention's fewer key/value heads with
    ``enable_gqa=True`` for the queries ``q`` (batch, heads, q_len, d_head), rather than keys and
    values repeated for every query head: where this torch has it, on the CPU (its kernels take
    the grouped heads with or without a mask, at least as fast as expanding first: 7.7-8.8 against
    8.0-9.4 ms for 50 (4, 8, 64, 32) calls with 2 key/value heads, torch 2.13), and on CUDA without a
    mask (``masked``: a boolean or float mask is given) and with d_head <= 256, where the flash
    kernel groups the heads itself. With a mask, CUDA's memory-efficient kernel refuses grouped
    heads and SDPA would fall back to its math kernel (the whole score matrix in memory), so the
    heads are expanded there, and on other devices."""
    if not SDPA_HAS_GQA:
        return False
    if q.device.type == "cpu":
        return True
    return q.device.type == "cuda" and not masked and q.shape[-1] <= 256


def _find_onednn_linear() -> Callable[..., Tensor] | None:
    """oneDNN's linear with a fused element-wise epilogue, where this torch has it."""
    if not torch.backends.mkldnn.is_available():
        return None
    return getattr(torch.ops.mkldnn, "_linear_pointwise", None)


ONEDNN_LINEAR = _find_onednn_linear()
"""The op, or None where this torch lacks it or a call to it failed (then ``F.linear`` is used)."""
HAS_ONEDNN = ONEDNN_LINEAR is not None
"""Whether this torch has oneDNN's linear."""

ONEDNN_ACTIVATIONS = {
    "none": ("none", ""),
    "relu": ("relu", ""),
    "gelu": ("gelu", "none"),
    "gelu_tanh": ("gelu", "tanh"),
    "silu": ("swish", ""),
}
"""Each activation of :class:`~vaswani.layers.linear.Linear` → oneDNN's (name, algorithm) of it."""


def portable() -> bool:
    """Whether the model is being traced into a graph for another runtime (``torch.onnx.export``
    traces with ``torch.jit``): every projection is then ``F.linear``, which ONNX has an operator
    for, whatever this machine's fastest kernel is."""
    return torch.jit.is_tracing()


SMALL_WEIGHT = 1 << 16
"""The most elements of a weight whose products ``F.linear`` computes in inference rather than
oneDNN's linear (:func:`small_product`): a 128 → 512 or 256 → 256 projection."""
SMALL_PRODUCT = 1 << 20
"""The most multiply-adds (rows × weight elements) of such a product: 16 rows of the largest."""


def small_product(x: Tensor, weight: Tensor) -> bool:
    """Whether ``x Wᵀ`` is small enough (at most :data:`SMALL_WEIGHT` weights, at most
    :data:`SMALL_PRODUCT` multiply-adds) that oneDNN's linear costs more than ``F.linear``: its call
    has a fixed cost of about 15-18 µs (the primitive's lookup and set-up), which so small a
    product does not earn back. Measured on an AMD EPYC, one thread, torch 2.13, F.linear's time
    over oneDNN's, with the weights in cache (one layer called again and again) and out of it (96
    MB of copies cycled through, as a decoding step reads a model): 128 → 128, 384 and 512 (a 2 + 2,
    d_model 128 translator's projections) 0.23-0.41 and 0.52-0.85 at one row, 0.56-0.86 and 0.71-0.96
    at 32 rows; 256 → 256 0.38 and 0.82 at one row. Past the bound oneDNN leads out of cache:
    256 → 768 and 1024 at 1.01-1.17, 512 → 512 at 0.94-1.14, 512 → 1536 and 2048 at 1.02-1.51, and
    in cache from about 4M multiply-adds (1.08-1.27 at 128 rows). Batch-1 greedy decoding of the
    d_model 128 translator: 1.6x with F.linear for every product (random weights)."""
    rows = x.numel() // max(1, x.shape[-1])
    return weight.numel() <= SMALL_WEIGHT and rows * weight.numel() <= SMALL_PRODUCT


def onednn_applies(x: Tensor, weight: Tensor) -> bool:
    """Whether ``act(x Wᵀ + b)`` should run through oneDNN's linear: float32 on the CPU, no
    gradient needed (the kernel has no backward), no autocast (which the kernel would bypass),
    a product larger than :func:`small_product`'s bound. There it is 8-20% faster per call than
    MKL's GEMM behind ``F.linear`` at our models' shapes, more with the activation fused: +9%
    sentences/s of beam search (``benchmarks/marian_speed.py``), BERT encoding from parity to 1.17x
    Hugging Face's (``benchmarks/bert_speed.py``). Not while ``torch.compile`` traces: inductor
    lowers this op only for weights it has frozen as constants (an assertion fails otherwise), and
    it chooses and fuses the GEMM of ``F.linear`` itself."""
    return (
        ONEDNN_LINEAR is not None
        and not small_product(x, weight)
        and not torch.compiler.is_compiling()
        and not portable()
        and x.device.type == "cpu"
        and x.dtype == weight.dtype == torch.float32
        and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
        and not torch.is_autocast_enabled("cpu")
    )


BLOCK_COLUMNS = 16
"""Output columns in a block of :func:`blocked_weight`: one AVX-512 vector of float32 (two AVX2 ones)."""
BLOCKED_ROWS = 2
"""The most rows whose products compiled decoding computes from blocked weights
(:func:`blocked_applies`). Measured on an AMD EPYC, 2 threads, torch 2.13: the products of a 6-layer
d_model 512 decoder step and an 8,000-word output projection (104 MB of weights, out of cache),
compiled, 3.0-3.2 ms at one row (33-35 GB/s) against 4.7-5.3 ms (20-22 GB/s) by oneDNN's linear;
at 2 rows 4.1 against 6.7 ms, at 4 rows 6.4 against 6.7, at 8 rows 13.3 against 7.7 (the reduction
reads the weights once a row there)."""


def blocked_weight(weight: Tensor) -> Tensor:
    """W (out, in) as B (⌈out / 16⌉, in, 16): blocks of :data:`BLOCK_COLUMNS` output columns, B[b, k, j]
    = W[16 b + j, k], each block's in × 16 floats contiguous, zero columns padding out to a
    multiple of 16, in W's dtype (float32, or int8 for quantized weights). A copy, detached from autograd."""
    out, width = weight.shape
    w = weight.detach()
    if pad := -out % BLOCK_COLUMNS:
        w = torch.cat([w, w.new_zeros(pad, width)])
    return w.reshape(-1, BLOCK_COLUMNS, width).transpose(1, 2).contiguous()


def blocked_product(x: Tensor, blocked: Tensor, out_features: int, scales: Tensor | None = None) -> Tensor:
    """x Wᵀ (…, out_features) for x (…, in) from W's :func:`blocked_weight` B: y[m, 16 b + j] =
    Σ_k x[m, k] B[b, k, j]; for int8 weights q with per-output scales s (out_features,), W = s ⊙ q
    and y = s ⊙ (x qᵀ), the int8 values widened in the loop (a quarter of float32's bytes read).
    Inductor compiles the broadcast product and sum to one loop over the blocks, split between the
    threads, each block's weights read once, in order, into a 16-lane vector sum: a batch-1
    decoding step's products near the memory's speed, which oneDNN's and MKL's GEMM reach at half
    of it on a row (:data:`BLOCKED_ROWS`). Eagerly it would hold the whole (rows, in, out) product:
    for compiled graphs only (:func:`blocked_applies`)."""
    weights = blocked if blocked.dtype == x.dtype else blocked.to(x.dtype)
    sums = (x.reshape(-1, 1, blocked.shape[1], 1) * weights).sum(2)  # (rows, blocks, 16)
    y = sums.reshape(*x.shape[:-1], blocked.shape[0] * BLOCK_COLUMNS)[..., :out_features]
    return y if scales is None else y * scales


def blocked_applies(x: Tensor, blocked: Tensor | None) -> bool:
    """Whether a projection of ``x`` should be :func:`blocked_product` of its ``blocked`` weights
    (None where it has none): while ``torch.compile`` traces, float32 activations and float32 or
    int8 weights on the CPU, at most :data:`BLOCKED_ROWS` rows, no autocast."""
    return (
        blocked is not None
        and torch.compiler.is_compiling()
        and x.device.type == "cpu"
        and x.dtype == torch.float32
        and blocked.dtype in (torch.float32, torch.int8)
        and x.numel() <= BLOCKED_ROWS * x.shape[-1]
        and not torch.is_autocast_enabled("cpu")
    )


def onednn_linear(x: Tensor, weight: Tensor, bias: Tensor | None, activation: str) -> Tensor | None:
    """``act(x Wᵀ + b)`` by oneDNN's linear (the same float32 arithmetic as ``F.linear`` in another
    order: results differ at rounding level), or None when the call fails: the op is then turned
    off for the process with one warning, and the caller computes ``F.linear`` instead."""
    global ONEDNN_LINEAR
    op = ONEDNN_LINEAR
    if op is None:
        return None
    attr, algorithm = ONEDNN_ACTIVATIONS[activation]
    try:
        return op(x, weight, bias, attr, [], algorithm)
    except Exception as exc:  # a private op: its signature or its support may change with torch
        if is_out_of_memory(exc):  # a lack of memory, not of the op: F.linear would fail too
            raise
        ONEDNN_LINEAR = None
        warnings.warn(
            f"oneDNN's linear failed ({first_line(exc)}); using F.linear from now on",
            RuntimeWarning,
            stacklevel=2,
        )
        return None


def mkl_skips_avx512(cpuinfo: str) -> bool:
    """Whether the x86 CPU described by ``cpuinfo`` (the text of Linux's ``/proc/cpuinfo``) has
    AVX-512 (``avx512f``) and is not Intel's (``vendor_id`` ``AuthenticAMD``, ``HygonGenuine``, …):
    there MKL dispatches its AVX2 kernels, and oneDNN its AVX-512 ones. False for an Intel CPU, an
    x86 CPU without AVX-512 (AVX2 in both libraries) and a CPU that names no vendor (not x86)."""
    fields = [line.split(":", 1) for line in cpuinfo.splitlines() if ":" in line]
    vendors = {value.strip() for key, value in fields if key.strip() == "vendor_id"}
    flags = {flag for key, value in fields if key.strip() == "flags" for flag in value.split()}
    return bool(vendors) and "GenuineIntel" not in vendors and "avx512f" in flags


def _read_cpuinfo() -> str:
    """Linux's ``/proc/cpuinfo``, or "" where it cannot be read (another OS)."""
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


MKL_SKIPS_AVX512 = torch.backends.mkl.is_available() and mkl_skips_avx512(_read_cpuinfo())
"""Whether torch's BLAS is MKL on a CPU where it skips AVX-512 (:func:`mkl_skips_avx512`), read once
at import."""


def int8_rows_apply(x: Tensor) -> bool:
    """Whether an int8 layer should quantize ``x`` row by row to int8 and multiply with int32 sums
    (``torch._int_mm``): on the CPU, not while tracing or compiling. AMD EPYC (AVX512-VNNI), one
    thread, a (768 → 3072) layer: 36 µs at one row against 173 µs in float32 and, through the
    weight-only ``_weight_int8pack_mm``, about 1 ms; at 32 rows 429 against 1,783 µs (int8pack: 32
    ms). GPT-2's LM head (768 → 50,257) at one row: 2.9 ms against 10.9 in float32."""
    return (
        hasattr(torch, "_int_mm")
        and x.device.type == "cpu"
        and x.dtype in (torch.float32, torch.bfloat16)
        and not torch.compiler.is_compiling()
        and not portable()
    )


def int8pack_applies(x: Tensor) -> bool:
    """Whether an int8 layer whose rows are not quantized (:func:`int8_rows_apply` false) should
    multiply by ``torch.ops.aten._weight_int8pack_mm`` rather than by its weight dequantized: not
    while ``torch.compile`` traces on the CPU, where inductor calls the aten kernel as it is. The
    en→zh translator (2 + 2 layers, d_model 128) with ``--quantize int8``, compiled batch-1 greedy
    decoding of 100 test sentences (its encoder's rows take this path), AMD EPYC, 2 threads:
    182-191 sentences/s with the kernel in the graphs, 298-328 with the weights dequantized."""
    return not (torch.compiler.is_compiling() and x.device.type == "cpu")


HAS_CUSTOM_OP = hasattr(torch.library, "custom_op")
"""Whether this torch has ``torch.library.custom_op`` (2.4 and later), which the training path needs."""

ONEDNN_TRAINING = ONEDNN_LINEAR if HAS_CUSTOM_OP else None
"""oneDNN's linear for training's products (:func:`onednn_train_linear`), or None where this torch
lacks it or custom ops, or a call to it failed (then ``F.linear`` and its autograd are used). Its
own switch: a failure in one path turns off that path only."""


def onednn_trains(x: Tensor, weight: Tensor) -> bool:
    """Whether a projection ``x Wᵀ + b`` that needs gradients should run its forward and backward
    products through oneDNN's linear (:func:`onednn_train_linear`) rather than ``F.linear`` and its
    autograd, which call MKL's GEMM: float32 on the CPU, gradients on, no autocast, on a CPU with
    AVX-512 where MKL runs its AVX2 kernels (:data:`MKL_SKIPS_AVX512`). Inside ``torch.compile``
    too: the products are one custom op to it, and inductor fuses what lies between them.

    Measured on an AMD EPYC (Zen 5: AVX-512 with full 512-bit units), 1 thread, torch 2.13, at the
    ViT-Ti/16 shapes (6,304 rows by 192 → 576, 192 → 192, 192 → 768, 768 → 192): MKL's ``addmm``
    and the backward ``mm`` run at 94-103 GFLOP/s (its AVX2 kernels), oneDNN's linear at 212-230
    GFLOP/s for the forward and the input gradient, 138-176 GFLOP/s for the weight gradient
    (reading the transposed operands as strided views): the ViT-Ti training step from 1.02x to
    about 1.5x Hugging Face's (``benchmarks/vit_speed.py``). On an Intel CPU (a Xeon with AVX-512
    and AMX) MKL runs its AVX-512 kernels, and float32 products use no AMX tiles in either library,
    so oneDNN has no such margin there, and its extra copies (a transposed operand of each weight
    gradient) would lose: training keeps ``F.linear`` on Intel CPUs, and on x86 CPUs without AVX-512
    (AVX2 kernels in both libraries)."""
    return (
        ONEDNN_TRAINING is not None
        and MKL_SKIPS_AVX512
        and not portable()
        and x.device.type == "cpu"
        and x.dtype == weight.dtype == torch.float32
        and torch.is_grad_enabled()
        and (x.requires_grad or weight.requires_grad)
        and not torch.is_autocast_enabled("cpu")
    )


def onednn_compiles(x: Tensor, weight: Tensor) -> bool:
    """Whether a projection traced by ``torch.compile`` without gradients (compiled decoding) should
    call oneDNN's linear as one custom op (:func:`onednn_train_linear`), opaque to inductor, rather
    than ``F.linear``, which inductor lowers to MKL's ``addmm``: float32 on the CPU, no autocast,
    where MKL runs its AVX2 kernels on a CPU with AVX-512 (:data:`MKL_SKIPS_AVX512`).

    Measured on an AMD EPYC, 2 threads, torch 2.13, greedy batch-1 decoding of
    ``benchmarks/compiled_generation.py``'s GPT (6 × 384, ``--profile``): in the compiled step,
    inductor's ``addmm`` took 3.75 ms a token where the eager step's oneDNN linear took 2.54 for the
    same products, and the compiled step went from 1.09x to 1.31x Hugging Face's ``generate`` with
    the custom op. On an Intel CPU MKL runs its AVX-512 kernels: inductor keeps its own choice there,
    as it does for products within :func:`small_product`'s bounds (batch-1 greedy decoding of a
    2 + 2, d_model 128 translator: 1.67x with them left to inductor, random weights, 1 thread)."""
    return (
        ONEDNN_TRAINING is not None
        and MKL_SKIPS_AVX512
        and torch.compiler.is_compiling()
        and not small_product(x, weight)
        and x.device.type == "cpu"
        and x.dtype == weight.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
    )


def _onednn_product(a: Tensor, b: Tensor, bias: Tensor | None) -> Tensor:
    """``a bᵀ (+ bias)`` (m, n) for 2-D ``a`` (m, k) and ``b`` (n, k), either possibly a strided
    view: by :data:`ONEDNN_TRAINING`, or by ``torch.addmm`` for empty operands (oneDNN makes no
    product of them) and once the op has failed (turned off for the process, with one warning)."""
    global ONEDNN_TRAINING
    op = ONEDNN_TRAINING
    if op is not None and a.numel() and b.numel():
        try:
            return op(a, b, bias, "none", [], "")
        except Exception as exc:  # a private op: its signature or its support may change with torch
            if is_out_of_memory(exc):  # a lack of memory, not of the op: addmm would fail too
                raise
            ONEDNN_TRAINING = None
            warnings.warn(
                f"oneDNN's linear failed in training ({first_line(exc)}); using F.linear from now on",
                RuntimeWarning,
                stacklevel=2,
            )
    zeros = a.new_zeros(a.shape[0], b.shape[0])
    return torch.addmm(zeros if bias is None else bias, a, b.t())


def _product_shape(a: Tensor, b: Tensor, bias: Tensor | None) -> Tensor:
    """The (m, n) result of :func:`onednn_product`, unfilled (for tracing)."""
    return a.new_empty(a.shape[0], b.shape[0])


def _keep_operands(ctx: Any, inputs: tuple[Tensor, Tensor, Tensor | None], output: Tensor) -> None:
    """Keeps ``a`` and ``b`` for the backward pass, and whether there was a bias."""
    a, b, bias = inputs
    ctx.save_for_backward(a, b)
    ctx.has_bias = bias is not None


def _product_backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """grad_a = g b, grad_b = gᵀ a (both by :func:`onednn_product`), grad_bias = Σ g over the rows.

    oneDNN's linear copies a transposed first operand to contiguous memory (a strided second one
    it reads as it is), so grad_b is computed as (aᵀ g)ᵀ where a has fewer columns than g: the
    smaller of the two is copied (192 against 768 columns at ViT-Ti's first FFN layer: its weight
    gradient at 172 against 154 GFLOP/s)."""
    a, b = ctx.saved_tensors
    needs_a, needs_b, needs_bias = ctx.needs_input_grad
    grad_a = onednn_product(grad, b.t(), None) if needs_a else None
    grad_b = None
    if needs_b:
        if a.shape[1] < grad.shape[1]:
            grad_b = onednn_product(a.t(), grad.t(), None).t()
        else:
            grad_b = onednn_product(grad.t(), a.t(), None)
    grad_bias = grad.sum(0) if ctx.has_bias and needs_bias else None
    return grad_a, grad_b, grad_bias


if HAS_CUSTOM_OP:
    onednn_product = torch.library.custom_op("vaswani::onednn_product", mutates_args=())(_onednn_product)
    """:func:`_onednn_product` as one custom op, with its autograd: opaque to ``torch.compile``."""
    onednn_product.register_fake(_product_shape)
    onednn_product.register_autograd(_product_backward, setup_context=_keep_operands)


def onednn_train_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``x Wᵀ + b`` (x: (…, in), W: (out, in)) → (…, out) with gradients, every product (forward,
    grad_x, grad_W) by oneDNN's linear (:func:`onednn_trains` says where): the same float32
    arithmetic as ``F.linear`` and its backward in another order (results differ at rounding
    level)."""
    rows = onednn_product(x.reshape(-1, x.shape[-1]), weight, bias)
    return rows.view(*x.shape[:-1], weight.shape[0])
