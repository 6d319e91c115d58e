"""The frame-skip notebook runs top to bottom in quick mode, trains inverted_pendulum at
K = 1..4 over several seeds and prints a table and a verdict on the per-update curves."""

import math
import re

import pytest
from notebook_runner import NUMBER, images, number, run_notebook


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
        # Every K learned: measured 200.0 for each; the untrained linear policy scores about
        # 80 and K = 1's first eval (after 5 updates) 104, so a K that learns nothing fails.
        assert final >= 150.0, (k, final, text[-3000:])
    match = re.search(
        r"K=1 learning: first eval median " + NUMBER + " -> final median " + NUMBER, text
    )
    assert match, f"learning line not printed; output:\n{text[-3000:]}"
    assert float(match.group(2)) > float(match.group(1)) + 20.0  # measured: 103.9 -> 200.0

    # The verdict, recomputed from the printed ratios and the printed criterion.
    ratios = {k: number(rf"K={k}: ", text.split("area / area(K=1):")[-1]) for k in rows}
    for k, (_, area, *_) in rows.items():
        # The ratios are the table's areas over K = 1's (both printed rounded).
        assert abs(ratios[k] - area / rows[1][1]) <= 0.006, (k, ratios[k], area, rows[1][1])
    tolerance = number(r"criterion: every area within ±", text) / 100
    assert tolerance == 0.20  # the criterion fixed before looking (the notebook's markdown)
    same = all(abs(r - 1) <= tolerance for r in ratios.values())
    verdict = re.search(r"^verdict per update: (\S+)$", text, flags=re.MULTILINE)
    assert verdict, f"verdict not printed; output:\n{text[-3000:]}"
    assert verdict.group(1) == ("near-identical" if same else "differ"), (ratios, verdict[0])
    assert images(nb) >= 1  # the two-panel learning curves
