"""``layers/cross_entropy.py``: the head and the loss in one chunked pass equal
``F.cross_entropy(F.linear(...))`` in value and in every gradient, and keep no (rows, vocab) tensor."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from vaswani.config import ModelConfig
from vaswani.layers.cross_entropy import linear_cross_entropy
from vaswani.models.bert import MaskedLM
from vaswani.models.gpt import GPT


def reference(h, w, b, y, n_classes):
    logits = F.linear(h, w, b)[:, :n_classes]
    wide = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return F.cross_entropy(wide, y, reduction="sum", ignore_index=-100)


def leaves(n=37, d=16, v=29, bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=g, dtype=torch.float64).requires_grad_()
    w = torch.randn(v, d, generator=g, dtype=torch.float64).requires_grad_()
    b = torch.randn(v, generator=g, dtype=torch.float64).requires_grad_() if bias else None
    return h, w, b


@pytest.mark.parametrize("chunk", [1, 5, 37, 100])
@pytest.mark.parametrize("bias", [True, False])
def test_equals_the_reference_in_value_and_gradients(chunk: int, bias: bool) -> None:
    h, w, b = leaves(bias=bias)
    y = torch.randint(0, 25, (37,), generator=torch.Generator().manual_seed(1))
    y[[3, 20]] = -100  # ignored rows
    grad_out = torch.tensor(0.7)
    ours = linear_cross_entropy(h, w, b, y, n_classes=25, chunk=chunk)
    ours_grads = torch.autograd.grad(ours * grad_out, [t for t in (h, w, b) if t is not None])
    theirs = reference(h, w, b, y, 25)
    their_grads = torch.autograd.grad(theirs * grad_out, [t for t in (h, w, b) if t is not None])
    torch.testing.assert_close(ours.double(), theirs.double(), rtol=1e-6, atol=1e-6)
    for a, e in zip(ours_grads, their_grads, strict=True):
        torch.testing.assert_close(a, e, rtol=1e-6, atol=1e-9)
    assert float(ours_grads[0][3].abs().sum()) == 0.0  # an ignored row gets no gradient
    assert float(ours_grads[1][25:].abs().sum()) == 0.0  # nor the padding rows of the vocabulary


def test_gradcheck() -> None:
    h, w, b = leaves(n=7, d=3, v=5)
    y = torch.tensor([0, 4, 2, -100, 1, 3, 3])
    assert torch.autograd.gradcheck(lambda h, w, b: linear_cross_entropy(h, w, b, y, chunk=3), (h, w, b))


def test_bf16_autocast_is_close_to_the_reference() -> None:
    h, w, b = (t.detach().float().requires_grad_() for t in leaves(n=64, d=32, v=50))
    y = torch.randint(0, 50, (64,), generator=torch.Generator().manual_seed(2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = linear_cross_entropy(h, w, b, y, chunk=16)
        theirs = reference(h, w, b, y, 50)
    torch.testing.assert_close(ours, theirs, rtol=2e-2, atol=0)
    ga = torch.autograd.grad(ours, [w])[0]
    gb = torch.autograd.grad(theirs, [w])[0]
    assert ga.dtype == w.dtype
    torch.testing.assert_close(ga, gb, rtol=5e-2, atol=5e-2)


def test_no_logits_are_saved_for_backward() -> None:
    n, d, v = 512, 8, 4096
    h = torch.randn(n, d, requires_grad=True)
    w = torch.randn(v, d, requires_grad=True)
    y = torch.randint(0, v, (n,))
    saved: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        linear_cross_entropy(h, w, None, y, chunk=64).backward()
    assert max(saved) <= max(n * d, v * d)  # ∂h and ∂W; never n × v
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        saved.clear()
        reference(h, w, None, y, v).backward()
    assert max(saved) >= n * v  # what the fused pass avoids


def test_gpt_forward_with_targets_is_the_summed_loss_of_its_logits() -> None:
    cfg = ModelConfig(arch="decoder_only", vocab_size=64, d_model=16, n_heads=2, d_ff=32, n_layers=2,
                      max_len=16, dropout=0.0, position="learned", norm_placement="pre")  # fmt: skip
    torch.manual_seed(0)
    model = GPT(cfg)
    tokens = torch.randint(0, 50, (3, 9))
    fused = model(tokens[:, :-1], targets=tokens[:, 1:], n_classes=50)
    fused_grads = torch.autograd.grad(fused, list(model.parameters()))
    logits = model(tokens[:, :-1])[..., :50]
    plain = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten(), reduction="sum")
    plain_grads = torch.autograd.grad(plain, list(model.parameters()))
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-5)
    for a, e in zip(fused_grads, plain_grads, strict=True):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("nsp", [False, True])
def test_masked_lm_forward_with_targets_is_the_summed_loss_of_its_logits(nsp: bool) -> None:
    cfg = ModelConfig(arch="encoder_only", vocab_size=64, d_model=16, n_heads=2, d_ff=32, n_layers=2,
                      max_len=16, dropout=0.0, pooler=nsp, tie_embeddings="all")  # fmt: skip
    torch.manual_seed(0)
    model = MaskedLM(cfg, nsp=nsp)
    tokens = torch.randint(4, 50, (3, 9))
    segments = (torch.arange(9) >= 5).long().expand(3, -1)
    mask = torch.ones_like(tokens, dtype=torch.bool)
    chosen = torch.rand(3, 9, generator=torch.Generator().manual_seed(1)) < 0.3
    targets = tokens[chosen]
    kwargs = {"predict": chosen, "next_sentence": nsp}

    def summed(out: Tensor | tuple[Tensor, Tensor]) -> Tensor:
        return out[0] + out[1].sum() if isinstance(out, tuple) else out  # the NSP logits' gradient too

    fused = summed(model(tokens, segments, mask, **kwargs, targets=targets, n_classes=50))
    fused_grads = torch.autograd.grad(fused, list(model.parameters()))
    out = model(tokens, segments, mask, **kwargs)
    logits = out[0] if isinstance(out, tuple) else out
    plain = F.cross_entropy(logits[:, :50].float(), targets, reduction="sum")
    plain = plain + out[1].sum() if isinstance(out, tuple) else plain
    plain_grads = torch.autograd.grad(plain, list(model.parameters()))
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-5)
    for a, e in zip(fused_grads, plain_grads, strict=True):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-6)
