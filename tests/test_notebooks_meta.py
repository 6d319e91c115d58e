"""The meta-learning notebook (issue 62) runs top to bottom in quick mode and prints what it
claims: over many seeds PES's and NRES's unroll estimates are within 3 standard errors of
autodiff through the whole unroll, at θ = -4 and across a sweep of θ, truncated ES's are
not; online meta-training takes each strategy from log η = -4 to near the grid minimum."""

import re

import pytest
from notebook_runner import NUMBER, images, number, run_notebook


@pytest.mark.slow
def test_meta_step_size_notebook_estimates_match_autodiff_and_training_finds_the_minimum():
    text, nb = run_notebook("13_meta_step_size.ipynb")
    best = number(r"grid minimum: log step size", text)
    assert -2.2 < best < -1.8, best  # measured -2.00

    rows = re.findall(
        r"(\w+): estimate "
        + NUMBER
        + r", autodiff "
        + NUMBER
        + r", s\.e\. "
        + NUMBER
        + r", z "
        + NUMBER,
        text,
    )
    z = {name: float(row[3]) for name, *row in rows}
    assert sorted(z) == ["nres", "pes", "truncated_es"], rows
    assert abs(z["pes"]) < 3 and abs(z["nres"]) < 3, z  # measured -1.31, -0.68
    assert abs(z["truncated_es"]) > 10, z  # measured 26.8
    gradient = {float(row[1]) for _, *row in rows}
    assert len(gradient) == 1 and -50 < gradient.pop() < -40  # -44.10

    assert number(r"largest \|z\| over the sweep, pes:", text) < 3  # measured 1.6
    assert number(r"largest \|z\| over the sweep, nres:", text) < 3  # measured 1.5
    assert number(r"largest \|z\| over the sweep, truncated_es:", text) > 10  # measured 37.6

    for name in ("pes", "nres", "truncated_es"):
        final = number(rf"{name}: final log step size", text)
        assert abs(final - best) < 0.3, (name, final)  # measured -2.07, -2.06, -2.10
        assert number(rf"{name}: final log step size [-0-9.]+, meta-loss", text) < 10  # 6.6
    assert images(nb) >= 3  # the estimates' histogram, the sweep, the training curves
