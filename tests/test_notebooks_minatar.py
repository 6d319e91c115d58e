"""The MinAtar notebook runs top to bottom in quick mode: it trains Breakout-MinAtar until
the trained policy beats the untrained one, draws the curve and a replay strip, and prints a
frame-skip table for K = 1..4."""

import math
import re
import statistics

import pytest
from notebook_runner import NUMBER, images, run_notebook

# Quick mode's frame-skip sizes (the notebook's SMALL): P = 32, 100-step episodes, conv.
P, L = 32, 100
LEARN_L = 1000  # the learning run keeps gymnax's episodes


def seeds(label: str, text: str) -> list[float]:
    found = re.search("^" + label + r" " + NUMBER + r" \(seeds \[([^\]]*)\]\)", text, re.M)
    assert found, f"{label!r} missing; output:\n{text[-3000:]}"
    values = [float(v) for v in found.group(2).split(",")]
    assert float(found.group(1)) == pytest.approx(statistics.median(values), abs=0.006)
    return values


@pytest.mark.slow
def test_minatar_notebook_trains_replays_and_sweeps_frame_skip():
    text, nb = run_notebook("11_minatar.ipynb")
    tail = text[-3000:]

    trained = re.search(
        r"1000-step episodes, vbn_conv, noise lowrank \(r = 1\), (\d+) updates, 3 seeds", text
    )
    assert trained and int(trained.group(1)) == 40, f"training line missing; output:\n{tail}"
    # Learning, not just running: the trained centre's median eval return over the three seeds
    # beats the untrained centre's, each evaluated on the runner's own eval episodes (measured
    # on the 2-core AMD EPYC under load: untrained 0.375, 0.375 and 0.5, trained 1.625, 1.625
    # and 4.375 after 40 updates, 39 s). The margin is what a centre that never moved scores
    # on other eval keys: the untrained centres evaluated at generations 5, 10, 20 and 40's
    # keys had medians 0.25, 0.75, 0.5 and 0.625, so an ES whose update never applies fails.
    untrained = seeds("untrained eval return, median over seeds:", text)
    final = seeds("trained eval return, median over seeds:", text)
    assert all(math.isfinite(v) and v >= 0.0 for v in untrained + final)
    assert statistics.median(final) >= statistics.median(untrained) + 0.75, (untrained, final)
    evals = re.search(r"eval returns first " + NUMBER + " -> final " + NUMBER, text)
    assert evals, f"eval line missing; output:\n{tail}"

    replay = re.search(
        r"replay: episode of (\d+) steps, return " + NUMBER + r", strip of (\d+) frames "
        r"\(expected (\d+)\)",
        text,
    )
    assert replay, f"replay line missing; output:\n{tail}"
    length, ret, drawn, expected = replay.groups()
    assert 1 <= int(length) <= LEARN_L and math.isfinite(float(ret))
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
