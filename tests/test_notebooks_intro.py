"""The quickstart and centre-of-mass notebooks run top to bottom in quick mode and print what
they claim."""

import re

import pytest
from notebook_runner import NUMBER, images, number, run_notebook


@pytest.mark.slow
def test_quickstart_notebook_converges_over_seeds_and_plots_the_curve():
    text, nb = run_notebook("01_quickstart.ipynb")
    start = number(r"start f:", text)
    assert start == pytest.approx(1212.0, rel=1e-3)  # Rosenbrock at x = -1 in 4-D
    assert re.search(r"population shape: \(32, 4\)", text)
    match = re.search(r"final f over (\d+) seeds: median " + NUMBER + ", max " + NUMBER, text)
    assert match, f"final f line not printed; output:\n{text[-3000:]}"
    seeds, median, worst = int(match.group(1)), float(match.group(2)), float(match.group(3))
    assert seeds == 8
    assert 0.0 <= median <= worst < 0.5  # from 1.2e3: more than 2000 times lower, every seed
    assert number(r"one seed, \d+ generations in one scan: final f", text) < 0.5
    assert images(nb) >= 1  # the learning curves


@pytest.mark.slow
def test_centre_of_mass_notebook_arrows_equal_the_classical_estimator():
    text, nb = run_notebook("02_centre_of_mass.ipynb")
    residuals = re.findall(r"arrow vs gradient residual \((\w+), (\w+)\): " + NUMBER, text)
    assert {(s, o) for s, o, _ in residuals} == {
        (s, o) for s in ("antithetic", "independent") for o in ("centroid", "model")
    }, text
    for sampling, origin, value in residuals:
        assert float(value) < 1e-5, (sampling, origin, value)
    for sampling in ("antithetic", "independent"):
        assert number(rf"strategy step vs arrow residual \({sampling}\):", text) < 1e-5
        assert number(rf"cosine of the step with -∇f\(θ\) \({sampling}\):", text) > 0.5
    assert re.search(r"centroid offset with antithetic pairs: 0\.0\b", text), text
    assert number(r"centroid offset with antithetic pairs:", text) == 0.0
    assert number(r"centroid offset without antithetic pairs:", text) > 1e-3
    assert images(nb) >= 2  # (a) with and (b) without antithetic pairs
