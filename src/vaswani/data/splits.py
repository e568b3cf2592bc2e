"""Deterministic held-out splits of a corpus that has none."""

from __future__ import annotations

import random
from collections.abc import Sequence

Pair = tuple[str, str]


def hold_out(
    pairs: Sequence[Pair], n_valid: int, n_test: int, seed: int = 0
) -> tuple[list[Pair], list[Pair], list[Pair]]:
    """Split ``pairs`` into (train, valid, test), with ``n_test`` and ``n_valid`` pairs held out.

    Pairs that share a source sentence (Tatoeba lists several translations of one English
    sentence) stay in one split, so that no test sentence is seen in training. The groups are
    shuffled with ``seed`` and taken in that order while they fit the held-out size; the result
    depends only on the pairs and the seed. Each split keeps the corpus order.
    """
    groups: dict[str, list[int]] = {}
    for index, (src, _) in enumerate(pairs):
        groups.setdefault(src, []).append(index)
    order = sorted(groups)
    random.Random(seed).shuffle(order)
    held: list[list[int]] = [[], []]
    train: list[int] = []
    for src in order:
        members = groups[src]
        for split, size in ((held[0], n_test), (held[1], n_valid)):
            if len(split) + len(members) <= size:
                split.extend(members)
                break
        else:
            train.extend(members)
    test, valid = held
    if len(test) < n_test or len(valid) < n_valid or not train:
        raise ValueError(
            f"{len(pairs)} pairs ({len(groups)} distinct sources) are too few to hold out "
            f"{n_test} for test and {n_valid} for valid"
        )
    return _pick(pairs, train), _pick(pairs, valid), _pick(pairs, test)


def _pick(pairs: Sequence[Pair], indices: list[int]) -> list[Pair]:
    return [pairs[i] for i in sorted(indices)]
