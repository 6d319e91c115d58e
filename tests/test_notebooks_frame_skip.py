"""The frame-skip notebook runs top to bottom in quick mode, trains inverted_pendulum at
K = 1..4 over several seeds and prints a table and a verdict on the per-update curves."""

import math
import re

import pytest
from notebook_runner import NUMBER, images, run_notebook


@pytest.mark.slow
def test_frame_skip_notebook_prints_every_k_and_a_verdict():
    text, nb = run_notebook("06_frame_skip.ipynb")
    rows = {
        int(m.group(1)): [float(v) for v in m.groups()[1:]]
        for m in re.finditer(
            r"^\s*([1-4])" + 5 * (r"\s+" + NUMBER) + r"\s*$", text, flags=re.MULTILINE
        )
    }
    assert sorted(rows) == [1, 2, 3, 4], f"table rows missing; output:\n{text[-3000:]}"
    for k, (final, area, lived, simulated, decisions) in rows.items():
        assert math.isfinite(final) and 0.0 < final <= 200.0, (k, final)  # 200-step episodes
        assert math.isfinite(area) and 0.0 < area <= 200.0, (k, area)
        # 30 updates of P = 32 episodes of at most 200 steps: the same budget for every K.
        assert 0 < lived <= simulated, (k, lived, simulated)
        assert lived <= 30 * 32 * 200, (k, lived)
        assert decisions == math.ceil(200 / k), (k, decisions)  # K times fewer decisions
    match = re.search(
        r"K=1 learning: first eval median " + NUMBER + " -> final median " + NUMBER, text
    )
    assert match, f"learning line not printed; output:\n{text[-3000:]}"
    assert float(match.group(2)) > float(match.group(1)) + 20.0  # measured: 94.6 -> 176.9
    assert re.search(r"criterion: every area within ±20% of K=1's", text), text
    assert re.search(r"^verdict per update: (near-identical|differ)$", text, flags=re.MULTILINE)
    assert images(nb) >= 1  # the two-panel learning curves
