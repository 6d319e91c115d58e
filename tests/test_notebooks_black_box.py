"""The black-box notebook (CMA-ES, xNES, Sep-CMA-ES and IPOP restarts) runs top to bottom in
quick mode, from ``notebooks/``, and prints what it claims."""

import re

import pytest
from notebook_runner import NOTEBOOKS, NUMBER, images, number, run_notebook


@pytest.mark.slow
def test_black_box_notebook_centre_of_mass_covariance_and_restarts():
    text, nb = run_notebook("09_black_box.ipynb", cwd=NOTEBOOKS)

    # 1. The new mean is the centre of mass of the best μ with the positive weights (float32).
    for name in ("cma_es", "sep_cma_es"):
        assert number(rf"centre of mass vs new mean \({name}\):", text) < 1e-5  # ~2e-7
    assert number(r"cma_es after \d+ generations: f\(mean\) =", text) < 1e-6  # 3.5e-9

    # 2. The 10-D rotated ellipsoid, condition 1e6: a full covariance reaches 1e-10 within
    # the budget (measured 4,200 and 10,370 evaluations), a diagonal one does not.
    reached = re.search(
        r"evaluations to 1e-10: cma_es (\d+), xnes (\d+), sep_cma_es not reached", text
    )
    assert reached, f"evaluations line not printed as expected; output:\n{text[-3000:]}"
    cma, xnes = int(reached.group(1)), int(reached.group(2))
    assert 0 < cma < xnes <= 20_000, (cma, xnes)
    learned = {
        name: number(rf"learned condition number: .*\b{name}", text)
        for name in ("cma_es", "xnes", "sep_cma_es")
    }
    assert 1e5 <= learned["cma_es"] <= 1e7, learned  # measured 1.26e6
    assert 1e5 <= learned["xnes"] <= 1e7, learned  # measured 1.15e6
    assert learned["sep_cma_es"] < 1e4, learned  # measured 407

    # 3. IPOP on bbob f15: λ doubles at each restart, the first run stops by a criterion.
    runs = re.findall(
        r"run (\d+): λ = (\d+), (\d+) evaluations, stopped by (\S+), best f - f\* = " + NUMBER,
        text,
    )
    assert len(runs) >= 2, text[-3000:]
    lambdas = [int(lam) for _, lam, _, _, _ in runs]
    assert lambdas[0] == 8 and all(
        b == 2 * a for a, b in zip(lambdas[:-1], lambdas[1:], strict=True)
    ), lambdas
    assert runs[0][3] not in ("budget", "target"), runs  # measured tolfun
    spent = sum(int(e) for _, _, e, _, _ in runs)
    assert number(r"final regret f - f\*:", text) == pytest.approx(
        min(float(r[4]) for r in runs), rel=1e-2
    )
    assert re.search(rf"after {spent} evaluations", text), (spent, text[-3000:])
    assert 0 <= number(r"final regret f - f\*:", text) <= float(runs[0][4])

    # Four generations × (CMA-ES | Sep-CMA-ES), and the 10-D curves.
    ecdf = re.search(r"reached at 1000·d: cma_es " + NUMBER + ", sep_cma_es " + NUMBER, text)
    assert ecdf, text[-2000:]
    full, diagonal = float(ecdf.group(1)), float(ecdf.group(2))
    assert 0 <= diagonal < full <= 1  # the rotated functions separate them
    assert images(nb) >= 6
