"""Notebook 12 fine-tunes a tiny Qwen2 model (jaxes_examples.lm_countdown, pre-trained in the
quick mode, cached) on Countdown by ES in quick mode, plots the run and exports it; it prints
the numbers read here."""

import pytest
from notebook_runner import images, number, run_notebook


@pytest.mark.slow
def test_llm_notebook_fine_tunes_a_real_family_and_exports_it():
    text, nb = run_notebook("12_llm_finetune.ipynb")
    assert "family qwen2, 2 layers" in text
    before = number(r"held-out greedy reward before:", text)
    after = number(r"held-out greedy reward after:", text)
    # The pre-trained model answers in the format (0.1 a problem) and rarely right.
    assert 0.05 <= before <= 0.5, text[-2000:]
    # ES draws the careful, right answers out: the held-out reward rises.
    assert after > before, (before, after)
    assert "loads back equal: True" in text
    assert images(nb) == 1
