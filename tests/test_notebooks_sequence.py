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

    # The sign of the updates, on what they climb: each centre's accuracy on the training
    # problems (the pool its batches are drawn from), before and after, as the notebook prints
    # it. `moved > 0` above holds just as well for a step the wrong way.
    trained = {
        m[3].strip(): (float(m[1]), float(m[2]))
        for m in re.finditer(
            r"^training accuracy " + NUMBER + " -> " + NUMBER + r"\s+(.+)$", text, re.MULTILINE
        )
    }
    assert sorted(trained) == sorted(METHODS), text[-3000:]
    es = [name for name in METHODS if name != "GRPO"]
    # ES: one method's few updates may end either way on the 176 problems (seeds 1 and 2, 15
    # updates each: two of the twelve ended below their start, one by 0.017; r=1, seed 1, 30
    # updates: 0.005 below), so the sign is the mean over the six. Measured (finetune with
    # updates=, seeds 0-2): the mean gain +0.042 to +0.045 after 15 updates, +0.06 to +0.07
    # after 20 (seeds 1, 2); with the update negated (optax.scale(-1) after Adam) -0.011 to
    # -0.039 after 15, -0.04 to -0.05 after 20. Below 15 updates it has no sign (seed 2, 5
    # updates: -0.007). This CPU gives each ES method 45-60 updates in the 2 s.
    updates = {name: rows[name][2] for name in es}
    assert min(updates.values()) >= 15, ("too few updates for the sign check", updates)
    gains = {name: trained[name][1] - trained[name][0] for name in es}
    assert sum(gains.values()) / len(gains) > 0, (gains, updates)
    # GRPO: a policy gradient of the wrong sign unlearns the answer format within its first
    # block (0.335 -> 0.006-0.017 after 10 updates, seeds 0-2); the right one is within 0.005
    # of its start or above after 20 updates, and climbs (0.335 -> 0.812 after 170, this CPU).
    before, after = trained["GRPO"]
    assert after > (before if rows["GRPO"][2] >= 100 else before - 0.05), (trained["GRPO"], rows)

    # Whether a method gains held-out accuracy within 2 s is not asserted: how many updates
    # fit depends on the machine, and 2 s moves few of the 66 answers (e8c1222, this CPU: the
    # best ES 0.379 against the start's 0.348, two ES variants below it; GRPO 0.667 after
    # 140 updates here, but 0.288 after 70 on CI's machine once). The full run's comparison
    # is in docs/benchmarks.md (Countdown).

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
