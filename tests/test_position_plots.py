"""``vaswani plot positions``: the numbers drawn equal the formulas (sinusoidal, rotary) and direct
computations (a learned table), each kind renders, and schemes without a table say so in one line."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from matplotlib.image import imread
from safetensors.torch import load_file

from tests.helpers import FIXTURES
from vaswani.cli import main
from vaswani.errors import RunDirError
from vaswani.inspect.positions import position_profile, profile, rotary_profile, spearman
from vaswani.layers.positions import RotaryPositions, sinusoidal_table
from vaswani.plots import DPI
from vaswani.plots.positions import positions_figure


def test_the_sinusoidal_profile_is_the_sum_of_cosines():
    """PE(p) · PE(p + k) = Σ_i cos(k ω_i), ω_i = 10000^(−2i/d), for every p."""
    length, d = 64, 32
    found = profile("sinusoidal", "formula", sinusoidal_table(length, d))
    omega = torch.tensor([10000 ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)
    expected = torch.stack([torch.cos(k * omega).sum() for k in range(length)])
    torch.testing.assert_close(found.by_distance, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(found.rows[16][16 + 5], expected[5], atol=1e-5, rtol=0)
    torch.testing.assert_close(found.rows[16][16 - 5], expected[5], atol=1e-5, rtol=0)
    assert found.symmetric and found.asymmetry < 1e-6 and found.falls
    assert found.monotone == next(k for k in range(1, length) if expected[k] >= expected[k - 1]) - 1


def test_a_learned_profile_is_the_mean_over_pairs_and_its_asymmetry():
    torch.manual_seed(0)
    table = torch.randn(12, 8)
    found = profile("learned", "weights", table)
    dots = [[float(table[p].double() @ table[q].double()) for q in range(12)] for p in range(12)]
    for k in range(12):
        pairs = [dots[p][p + k] for p in range(12 - k)]
        assert float(found.by_distance[k]) == pytest.approx(sum(pairs) / len(pairs))
    gaps = [abs(dots[p][p + k] - dots[p][p - k]) for k in range(1, 12) for p in range(k, 12 - k)]
    biggest = max(abs(x) for row in dots for x in row)
    assert found.asymmetry == pytest.approx(max(gaps) / biggest) and not found.symmetric
    assert found.rho == pytest.approx(spearman(torch.arange(12.0), found.by_distance))


def test_spearman_of_rising_and_falling_sequences():
    x = torch.arange(6.0)
    assert spearman(x, x**2) == pytest.approx(1.0) and spearman(x, -x) == pytest.approx(-1.0)


@pytest.mark.parametrize("interleaved", [False, True])
def test_the_rotary_kernel_is_the_rotated_dot_product(interleaved):
    d_head, length = 16, 40
    rotary = RotaryPositions(d_head, length, 10000.0, interleaved)
    ones = torch.ones(1, 1, length, d_head)
    rotated, _ = rotary(ones, ones, torch.arange(length)[None], length)
    direct = (rotated[0, 0, 0] @ rotated[0, 0].T).double() / d_head  # q · R_k q / |q|²
    found = rotary_profile("rope", d_head, length, 10000.0)
    torch.testing.assert_close(found.by_distance, direct, atol=1e-5, rtol=0)
    assert found.table is None and found.symmetric


def copied(name: str, tmp_path: Path, **model: object) -> Path:
    """A copy of the fixture run ``name`` with ``model`` fields changed in its config."""
    run = tmp_path / f"{name}-{'-'.join(map(str, model.values())) or 'as-is'}"
    shutil.copytree(FIXTURES / name, run)
    path = run / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["model"].update(model)
    path.write_text(json.dumps(config), encoding="utf-8")
    return run


def test_plot_positions_draws_each_kind(tmp_path, capsys):
    translation, mlm = copied("translation", tmp_path), copied("mlm", tmp_path)
    sinusoidal = position_profile(translation)
    cfg = json.loads((translation / "config.json").read_text())["model"]
    torch.testing.assert_close(sinusoidal.table, sinusoidal_table(cfg["max_len"], cfg["d_model"]).double())
    learned = position_profile(mlm)
    stored = load_file(mlm / "model.safetensors")["bert.embed.positions.embedding.weight"]
    torch.testing.assert_close(learned.table, stored.double())
    for run, panels in ((translation, 3), (mlm, 3), (copied("lm", tmp_path, position="rope"), 1)):
        out = tmp_path / f"{run.name}.png"
        assert main(["plot", "positions", str(run), "--out", str(out)]) == 0
        assert capsys.readouterr().out.strip() == str(out)
        height, width = imread(out).shape[:2]
        assert (width, height) == (round(4.6 * panels * DPI), round(4.0 * DPI))
    assert main(["plot", "positions", str(mlm)]) == 0 and (mlm / "positions.png").is_file()
    assert main(["plot", "loss", str(mlm)]) == 0 and (mlm / "loss_curves.png").is_file()


def test_the_title_says_whether_it_is_symmetric_and_falls():
    fig = positions_figure(profile("sinusoidal", "formula", sinusoidal_table(64, 128)), "run")
    assert (
        "symmetric: yes" in fig.texts[0].get_text() and "falls with distance: yes" in fig.texts[0].get_text()
    )
    alternating = torch.stack([torch.full((4,), (-1.0) ** p) for p in range(16)])  # p·(p+k) = 4 (−1)^k
    verdict = profile("learned", "weights", alternating).verdict()
    assert "symmetric: yes" in verdict and "falls with distance: no" in verdict
    growing = torch.stack([torch.full((4,), float(p)) for p in range(16)])
    # p·q = 4pq: the gap 4p(p+k) − 4p(p−k) = 8pk is largest at p = 8, k = 7 (p + k <= 15), max p·q = 900
    assert math.isclose(profile("learned", "weights", growing).asymmetry, 448 / 900)


@pytest.mark.parametrize("scheme", ["alibi", "relative"])
def test_schemes_in_attention_s_scores_are_one_line(tmp_path, scheme, capsys):
    run = copied("lm", tmp_path, position=scheme)
    with pytest.raises(RunDirError, match=f"positions '{scheme}' of a run of task 'lm' are not a table"):
        position_profile(run)
    assert main(["plot", "positions", str(run)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["plot", "curves", str(run)]) == 2
