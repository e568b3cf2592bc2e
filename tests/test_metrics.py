"""``vaswani.metrics``: macro-F1 of class ids."""

from __future__ import annotations

import pytest
import torch

from vaswani.metrics import accuracy_and_macro_f1


def test_accuracy_and_macro_f1():
    predicted, gold = torch.tensor([0, 0, 1, 1, 2, 0]), torch.tensor([0, 1, 1, 1, 0, 0])
    accuracy, macro_f1 = accuracy_and_macro_f1(predicted, gold)
    assert accuracy == pytest.approx(4 / 6)
    # F1: class 0: 2·2/(3+3) = 2/3; class 1: 2·2/(2+3) = 4/5; class 2 (predicted, never gold): 0.
    assert macro_f1 == pytest.approx((2 / 3 + 4 / 5 + 0) / 3)
    assert accuracy_and_macro_f1(gold, gold) == (1.0, 1.0)
