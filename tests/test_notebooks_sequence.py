"""The sequence fine-tune notebook (which imports jaxes_examples.countdown: problems, pretrain
and finetune) pre-trains the transformer by backprop, fine-tunes it on the Countdown reward by
every ES variant and by GRPO for the same seconds, and runs the answer-length experiment, in
quick mode; it prints the numbers read here.

One test, one notebook run: compiling the methods' programs is most of its cost (the suite's
persistent compile cache makes a rerun much faster). It runs from the repository root
(run_notebook's default): the notebook imports only the installed packages (jaxes and
jaxes_examples).
"""

import re

import pytest
from notebook_runner import NUMBER, images, number, run_notebook

METHODS = (
    "ES full-rank",
    "ES low-rank r=1",
    "ES low-rank r=4",
    "ES r=4 independent",
    "ES r=4 bf16",
    "ES r=4 int8 base",
    "GRPO",
)


@pytest.mark.slow
def test_sequence_notebook_compares_es_and_grpo_at_equal_seconds():
    text, nb = run_notebook("10_sequence_es.ipynb")
    # Pre-training teaches arithmetic: measured 1.000 of the 255 equations after the quick
    # mode's 600 steps. The Countdown start is chance-like (measured 0.348: it mostly
    # subtracts), since the corpus never shows which expression reaches a target.
    assert number(r"pre-trained arithmetic accuracy:", text) >= 0.9
    start = number(r"pre-trained held-out accuracy:", text)
    assert 0.1 <= start <= 0.6, text[-3000:]

    spaced = r"\s+" + NUMBER
    row = r"^(ES [\w=. -]+?|GRPO)" + 2 * spaced + r"\s+(\d+)" + 2 * spaced
    rows = {
        m[1].strip(): (float(m[2]), float(m[3]), int(m[4]), float(m[5]), float(m[6]))
        for m in re.finditer(row + "$", text, re.MULTILINE)
    }
    assert sorted(rows) == sorted(METHODS), text[-3000:]
    budget = 2.0  # the quick mode's seconds per method
    for name, (first, final, updates, seconds, moved) in rows.items():
        # Every method's learnt params moved (an ES whose tell never applied, or a loop that
        # never called it, prints 0).
        assert moved > 0, (name, moved)
        # Every method starts from the same params (measured with other XLA options, so a
        # near-tie may flip one of the 66 answers); the bf16 one from them rounded to bfloat16
        # (measured 0.364 against 0.348), the int8 one from them quantised.
        assert abs(first - start) <= (0.05 if "bf16" in name or "int8" in name else 0.02), name
        assert 0.0 <= final <= 1.0, (name, final)
        assert updates > 0 and seconds >= budget, (name, updates, seconds)
        # The last block may run over, but not by much more than a block.
        assert seconds <= 4 * budget, (name, seconds)
    # Whether a method gains held-out accuracy within 2 s is not asserted: how many updates
    # fit depends on the machine, and 2 s moves few of the 66 answers (e8c1222, this CPU: the
    # best ES 0.379 against the start's 0.348, two ES variants below it; GRPO 0.667 after
    # 140 updates here, but 0.288 after 70 on CI's machine once). The full run's comparison
    # is in docs/benchmarks.md.

    # The answer-length experiment: a row per k, the verdict recomputed from the means.
    length = {
        int(m[1]): (int(m[2]), *map(float, m.groups()[2:]))
        for m in re.finditer(
            r"^\s*([124])\s+(\d+)" + 5 * (r"\s+" + NUMBER) + r"\s*$", text, re.MULTILINE
        )
    }
    assert sorted(length) == [1, 2], text[-3000:]
    for k, (tokens, first, final, mean, reward, _) in length.items():
        assert tokens == 4 * k
        values = (first, final, mean, reward)
        assert all(0.0 <= a <= 1.0 for a in values), (k, values)
    assert length[1][1] == start  # k = 1 is the same pre-trained model
    same = all(abs(v[3] - length[1][3]) <= 0.05 for v in length.values())
    verdict = re.search(r"^verdict per update: (\S+)$", text, re.MULTILINE)
    assert verdict, text[-3000:]
    assert verdict[1] == ("invariant" if same else "differ"), (length, verdict[0])
    assert images(nb) >= 2  # accuracy against seconds and updates; the length curves
