"""jaxes.llm against transformers: tiny random Qwen2, Qwen3 and Llama 3 checkpoints (tied and
untied heads, one sharded, Llama 3.1's RoPE scaling) and what transformers computed from them,
made by tests/fixtures/hf/make_fixtures.py (transformers + PyTorch, outside this suite)."""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxes.llm import load, load_tokenizer
from jaxes.tasks.sequence import generate

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
MODELS = sorted(p.name for p in FIXTURES.iterdir() if (p / "config.json").is_file())
STEPS = 32


def test_every_family_has_a_tied_and_an_untied_fixture_and_one_is_sharded():
    assert [f"{f}-{t}" for f in ("llama3", "qwen2", "qwen3") for t in ("tied", "untied")] == MODELS
    assert (FIXTURES / "llama3-untied" / "model.safetensors.index.json").is_file()


def _reference(name):
    return dict(np.load(FIXTURES / name / "reference.npz"))


@pytest.fixture(scope="module", params=MODELS)
def case(request):
    pretrained = load(FIXTURES / request.param, cache_len=64)
    return request.param, pretrained, _reference(request.param)


def _start(mask):
    return jnp.asarray(np.argmax(mask, axis=1), jnp.int32)


def test_logits_equal_transformers_on_a_padded_batch(case):
    name, pretrained, ref = case
    model, params = pretrained.model, pretrained.params
    start = _start(ref["attention_mask"])
    logits, _ = jax.jit(lambda p, t, s: model.apply({"params": p}, t, start=s))(
        params, jnp.asarray(ref["input_ids"]), start
    )
    real = ref["attention_mask"].astype(bool)
    error = np.abs(np.asarray(logits)[real] - ref["logits"][real]).max()
    assert error < 1e-4, f"{name}: max logit error {error}"


def test_greedy_generation_equals_transformers(case):
    name, pretrained, ref = case
    model, params = pretrained.model, pretrained.params
    start = _start(ref["attention_mask"])

    def greedy(params, prompts, start):
        def apply_fn(tokens, cache, position):
            return model.apply({"params": params}, tokens, cache, position)

        return generate(apply_fn, model.init_cache(3, start=start), prompts, STEPS)

    tokens = jax.jit(greedy)(params, jnp.asarray(ref["input_ids"]), start)
    np.testing.assert_array_equal(np.asarray(tokens), ref["greedy"], err_msg=name)


@pytest.mark.parametrize("style", ["qwen", "llama"])
def test_tokenizer_ids_round_trip_and_chat_template_equal_transformers(style):
    ref = json.loads((FIXTURES / f"tokenizer_{style}.json").read_text())
    tokenizer = load_tokenizer(FIXTURES / ("qwen2-tied" if style == "qwen" else "llama3-tied"))
    for case in ref["texts"]:
        text = case["text"]
        assert tokenizer.encode(text) == case["input_ids"], text
        assert tokenizer.encode(text, add_special_tokens=False) == case["input_ids_no_special"]
        assert tokenizer.decode(case["input_ids"]) == case["decode_skip_special"]
        assert tokenizer.decode(case["input_ids"], skip_special_tokens=False) == case["decode"]
        # The text comes back whole, special tokens written in it included.
        assert tokenizer.decode(case["input_ids_no_special"], skip_special_tokens=False) == text
    for chat in ref["chats"]:
        rendered = tokenizer.apply_chat_template(chat["messages"], chat["add_generation_prompt"])
        assert rendered == chat["text"], chat["name"]
