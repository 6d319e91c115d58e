"""The intrinsic-dimension notebook runs top to bottom in quick mode: the §3.2 doubled-features
curves agree only with the rescaled σ and step, and the subspace table reports d90 for the
pendulum and the digits classifier."""

import re

import pytest
from notebook_runner import NUMBER, images, number, run_notebook


@pytest.mark.slow
def test_intrinsic_dimension_notebook_measures_the_doubled_problem_and_d90():
    text, nb = run_notebook("07_intrinsic_dimension.ipynb")
    # (a) 128 seeds: the rescaled doubled problem within noise of the original (measured
    # 1.4 s.e.), the unrescaled one far off (measured 50 s.e.), and ES learns (9.5 -> 1.4).
    assert number(r"σ/√2, lr/2: largest gap", text) < 4.5
    assert number(r"same σ and lr: largest gap", text) > 6.0
    assert number(r"original mean loss: [0-9.]+ ->", text) < 0.5 * number(
        r"original mean loss:", text
    )
    # (b) the full-space results the fractions are taken of: the pendulum learns to balance
    # (measured 200 of 200), the digits net classifies (measured 0.958).
    assert number(r"inverted_pendulum, full space \(369 params\):", text) >= 150.0
    assert number(r"digits, full space \(4810 params\):", text) >= 0.9
    rows = dict(re.findall(r"^(inverted_pendulum|digits): d90 = (\S+(?: \d+)?) of", text, re.M))
    assert set(rows) == {"inverted_pendulum", "digits"}, text[-3000:]
    # Measured: 4 (k = 2 reaches 0.39 of the full return) and 640 (of 4810).
    assert rows["inverted_pendulum"].isdigit() and int(rows["inverted_pendulum"]) <= 4
    table = re.findall(r"^(inverted_pendulum|digits)\s+\d+\s+\S+\s+(.*)$", text, re.M)
    fractions = {
        p: [float(f) for f in re.findall(r"k=\d+: " + NUMBER, cells)] for p, cells in table
    }
    assert len(fractions["inverted_pendulum"]) == 2 and len(fractions["digits"]) == 3
    digits = fractions["digits"]
    assert all(0.0 < f <= 1.1 for f in digits) and digits[-1] > digits[0] + 0.3  # k helps
    assert images(nb) >= 2  # the §3.2 curves and the fraction-vs-k plot
