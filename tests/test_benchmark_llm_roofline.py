"""benchmarks/llm_roofline.py (issue 57: the GPU recipe's time per generation from the plan's
shapes): its weight counts are the model's, and its floor is the larger of the two limits."""

import sys
from pathlib import Path

import jax
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the script imports `_common` as a sibling

import llm_roofline  # noqa: E402

from jaxes.llm import CausalLM, abstract_params, from_dict  # noqa: E402
from jaxes.llm.text_task import split_params  # noqa: E402


@pytest.mark.parametrize("size", ["tiny", "7B"])  # tied and untied
def test_the_weight_counts_are_the_models(size):
    model = CausalLM(from_dict(llm_roofline.CONFIGS[size]), 8)
    searched, frozen = split_params(abstract_params(model), False)
    shapes = llm_roofline.shapes(size)
    count = lambda tree: sum(x.size for x in jax.tree.leaves(tree))  # noqa: E731
    assert (shapes["searched"], shapes["frozen"]) == (count(searched), count(frozen))


def test_the_floor_is_bandwidth_bound_for_few_rows_and_compute_bound_for_many(monkeypatch):
    def seconds(chunk, gpus):
        monkeypatch.setattr(llm_roofline, "GPUS", gpus)
        return llm_roofline.generation_seconds("0.5B", chunk, 1, 16, chunk, 64, 256, "g")

    # One row a step reads every weight for a few flops: only the bandwidth matters.
    assert seconds(1, {"g": (1e15, 1e12)}) == pytest.approx(seconds(1, {"g": (2e15, 1e12)}))
    assert seconds(1, {"g": (1e15, 2e12)}) == pytest.approx(seconds(1, {"g": (1e15, 1e12)}) / 2)
    # Thousands of rows a step: the flops.
    many = {"g": (1e12, 1e15)}
    assert seconds(512, many) == pytest.approx(2 * seconds(512, {"g": (2e12, 1e15)}))
