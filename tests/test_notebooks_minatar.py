"""The MinAtar notebook runs top to bottom in quick mode: it trains Breakout-MinAtar, draws
the curve and a replay strip, and prints a frame-skip table for K = 1..4."""

import math
import re

import pytest
from notebook_runner import NUMBER, images, run_notebook

# Quick mode's sizes (the notebook's SMALL): P = 32, 100-step episodes, the conv policy.
P, L = 32, 100


@pytest.mark.slow
def test_minatar_notebook_trains_replays_and_sweeps_frame_skip():
    text, nb = run_notebook("11_minatar.ipynb")
    tail = text[-3000:]

    trained = re.search(r"P = 32, 100-step episodes, conv, (\d+) updates", text)
    assert trained and int(trained.group(1)) == 10, f"training line missing; output:\n{tail}"
    evals = re.search(r"eval returns: first " + NUMBER + " -> final " + NUMBER, text)
    assert evals, f"eval line missing; output:\n{tail}"
    assert all(math.isfinite(float(v)) and float(v) >= 0.0 for v in evals.groups())

    replay = re.search(
        r"replay: episode of (\d+) steps, return " + NUMBER + r", strip of (\d+) frames "
        r"\(expected (\d+)\)",
        text,
    )
    assert replay, f"replay line missing; output:\n{tail}"
    length, ret, drawn, expected = replay.groups()
    assert 1 <= int(length) <= L and math.isfinite(float(ret))
    assert int(drawn) == int(expected) == min(12, int(length))

    rows = {
        int(m.group(1)): [float(v) for v in m.groups()[1:]]
        for m in re.finditer(
            r"^\s*([1-4])" + 5 * (r"\s+" + NUMBER) + r"\s*$", text, flags=re.MULTILINE
        )
    }
    assert sorted(rows) == [1, 2, 3, 4], f"frame-skip rows missing; output:\n{tail}"
    for k, (final, best, decisions, per_update, lived) in rows.items():
        assert math.isfinite(final) and math.isfinite(best) and 0.0 <= final <= best, (k, final)
        assert decisions == math.ceil(L / k), (k, decisions)  # K times fewer decisions
        # An update simulates whole chunks (50 decisions of K steps for every member), at most
        # until every episode reaches L env steps: the batch stops once every episode is over.
        chunk = P * k * min(50, math.ceil(L / k))
        assert per_update % chunk == 0 and per_update <= P * k * math.ceil(L / k), (k, per_update)
        assert 0 < lived <= per_update, (k, lived)
    # Decisions per episode scale as 1/K (to rounding up).
    assert rows[1][2] / rows[4][2] == pytest.approx(4.0, rel=0.01)
    assert images(nb) >= 3  # the curve, the replay strip, the frame-skip curves
