"""The intrinsic-dimension notebook runs top to bottom in quick mode: the §3.2 doubled-features
curves agree only with the rescaled σ and step, and the subspace table reports d90 for the
pendulum and the digits classifier.

It runs from notebooks/ (the notebooks' other tests run from the repository root).
"""

import re

import pytest
from notebook_runner import NOTEBOOKS, NUMBER, images, number, run_notebook


@pytest.mark.slow
def test_intrinsic_dimension_notebook_measures_the_doubled_problem_and_d90():
    text, nb = run_notebook("07_intrinsic_dimension.ipynb", cwd=NOTEBOOKS)
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
    # Quick mode tries k = 4 alone for the pendulum (full mode: 1 to 16, d90 = 4, k = 3
    # reaching 0.88); measured in quick mode: d90 = 4 and 640 (of 4810) for the digits.
    assert rows["inverted_pendulum"] == "4"
    table = re.findall(r"^(inverted_pendulum|digits)\s+\d+\s+\S+\s+(.*)$", text, re.M)
    fractions = {
        p: [float(f) for f in re.findall(r"k=\d+: " + NUMBER, cells)] for p, cells in table
    }
    assert len(fractions["inverted_pendulum"]) == 1 and len(fractions["digits"]) == 3
    digits = fractions["digits"]
    assert all(0.0 < f <= 1.1 for f in digits) and digits[-1] > digits[0] + 0.3  # k helps
    assert_d90_is_the_smallest_k_at_90_percent(text, rows["digits"], digits)
    assert images(nb) >= 2  # the §3.2 curves and the fraction-vs-k plot


def assert_d90_is_the_smallest_k_at_90_percent(text, d90, table_fractions):
    """Recomputes the digits d90 from the accuracies the notebook printed (3 decimals, so each
    ratio is known to within its rounding): every k below d90 must not surely reach 90 % of the
    full-space accuracy, and d90 itself must not surely miss it."""
    full = number(r"digits, full space \(\d+ params\):", text)
    accuracy = {
        int(k): float(a) for k, a in re.findall(r"^digits, k = (\d+): " + NUMBER, text, re.M)
    }
    assert len(accuracy) == len(table_fractions) == 3, text[-3000:]
    half = 0.0005  # half a unit in the last printed place
    low = {k: (a - half) / (full + half) for k, a in accuracy.items()}
    high = {k: (a + half) / (full - half) for k, a in accuracy.items()}
    for k, fraction in zip(sorted(accuracy), table_fractions, strict=True):
        assert low[k] - 0.005 <= fraction <= high[k] + 0.005, (k, fraction, accuracy, full)
    assert d90.isdigit(), f"digits: d90 = {d90}: no k reached 90 %; measured 640"
    assert int(d90) in accuracy, (d90, accuracy)
    assert high[int(d90)] >= 0.9, (d90, accuracy, full)
    assert all(low[k] < 0.9 for k in accuracy if k < int(d90)), (d90, accuracy, full)
