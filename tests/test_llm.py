"""jaxes.llm: bad model directories, members run factored on the real families' decoder, the
export round trip, the rewards and the text task (the fixtures of tests/fixtures/hf)."""

import json
import logging
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxes
from jaxes import factored
from jaxes.llm import (
    ModelError,
    countdown_prompt,
    countdown_reward,
    export,
    load,
    numeric_reward,
    read_jsonl,
    text_task,
)
from jaxes.llm.text_task import RewardError, split_params
from jaxes.tasks.sequence import _pick, generate

FIXTURES = Path(__file__).parent / "fixtures" / "hf"


@pytest.fixture(scope="module")
def qwen2():
    return load(FIXTURES / "qwen2-tied", cache_len=32)


def _copy(tmp_path, name="qwen2-tied"):
    out = tmp_path / name
    shutil.copytree(FIXTURES / name, out)
    return out


# Bad input: one line naming what is wrong.


def test_a_directory_without_config_or_of_another_family_names_the_supported_families(tmp_path):
    with pytest.raises(ModelError, match="no config.json.*Qwen2/Qwen2.5.*Qwen3.*Llama 3"):
        load(tmp_path)
    model = _copy(tmp_path)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    with pytest.raises(ModelError, match="model_type 'gpt2' is not supported.*Llama 3"):
        load(model)


def test_a_hub_name_is_refused_with_how_to_download_it():
    with pytest.raises(ModelError, match="never downloads.*Qwen/Qwen2.5-0.5B"):
        load("Qwen/Qwen2.5-0.5B")


def test_a_tensor_that_disagrees_with_the_config_and_a_missing_shard_are_named(tmp_path):
    model = _copy(tmp_path)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "intermediate_size": 96}))
    wrong = r"layers.0.mlp.down_proj.weight has shape \(64, 128\).*\(64, 96\)"
    with pytest.raises(ModelError, match=wrong):
        load(model)
    sharded = _copy(tmp_path, "llama3-untied")
    (sharded / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(ModelError, match="shard model-00002-of-00003.safetensors is missing"):
        load(sharded)


def test_no_tokenizer_and_a_damaged_weights_file_are_one_line_each(tmp_path):
    model = _copy(tmp_path)
    (model / "tokenizer.json").unlink()
    with pytest.raises(ModelError, match="has no tokenizer.json"):
        load(model)
    model = _copy(tmp_path / "again")
    (model / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ModelError, match="model.safetensors is damaged"):
        load(model)


# Members on the real decoder.


@pytest.mark.parametrize("name", ["qwen2-tied", "llama3-untied"])
def test_a_low_rank_member_runs_factored_in_every_layer_and_equals_the_member_built(name, caplog):
    pretrained = load(FIXTURES / name, cache_len=16)
    model, params = pretrained.model, pretrained.params
    es = jaxes.open_es(4, sigma=0.05, noise=jaxes.noise.lowrank(rank=2))
    state = es.init(jax.random.key(0), params)
    _, state = es.ask(jax.random.key(1), state)
    delta = es.perturbation(state, 1)
    tokens = jnp.array([[3, 4, 5, 6, 7]])
    with caplog.at_level(logging.WARNING, logger="jaxes"):
        got, _ = jax.jit(lambda c, d: factored.apply(model, c, d, tokens))(state.params, delta)
    # Every matrix, the embedding table (and a tied head through it) included, took its term.
    assert "takes its low-rank displacement dense" not in caplog.text
    built = factored.member(state.params, delta)
    want, _ = jax.jit(lambda p: model.apply({"params": p}, tokens))(built)
    np.testing.assert_allclose(got, want, atol=2e-5)
    moved = np.abs(np.asarray(got) - np.asarray(model.apply({"params": params}, tokens)[0]))
    assert moved.max() > 1e-3  # the member is not the centre


def test_by_default_the_embeddings_and_head_stay_the_checkpoints(qwen2):
    searched, frozen = split_params(qwen2.params, embeddings=False)
    assert set(frozen) == {"embed_tokens"} and "embed_tokens" not in searched
    assert "layers_0" in searched and "norm" in searched
    every, none = split_params(qwen2.params, embeddings=True)
    assert none is None and every is qwen2.params


def test_top_p_keeps_only_the_nucleus():
    logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]]))
    keys = jax.random.split(jax.random.key(0), 400)
    draw = jax.vmap(lambda k, p: _pick(k, logits, 1.0, p), in_axes=(0, None))
    assert set(np.unique(draw(keys, 0.75))) == {0, 1}  # 0.5 + 0.3 reaches 0.75
    assert set(np.unique(draw(keys, 0.1))) == {0}  # the most likely token always stays
    assert set(np.unique(draw(keys, 1.0))) == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="top_p"):
        jaxes.tasks.sequence.generate(lambda *a: None, None, jnp.ones((1, 2), int), 2, top_p=1.5)


# Out again.


def test_export_writes_a_directory_that_loads_back_bit_for_bit_and_never_overwrites(
    qwen2, tmp_path
):
    moved = jax.tree.map(lambda x: x + 0.25, qwen2.params)
    files = export(qwen2, moved, tmp_path / "out")
    assert {"model.safetensors", "config.json", "tokenizer.json", "chat_template.jinja"} <= set(
        files
    )
    again = load(tmp_path / "out")
    for a, b in zip(jax.tree.leaves(again.params), jax.tree.leaves(moved), strict=True):
        np.testing.assert_array_equal(a, b)
    assert json.loads((tmp_path / "out" / "config.json").read_text())["model_type"] == "qwen2"
    before = sorted(p.name for p in (tmp_path / "out").iterdir())
    with pytest.raises(ModelError, match="exists and is not an empty folder"):
        export(qwen2, qwen2.params, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == before
    half = export(qwen2, moved, tmp_path / "bf16", dtype="bfloat16")
    assert "model.safetensors" in half
    config = json.loads((tmp_path / "bf16" / "config.json").read_text())
    assert config.get("dtype", config.get("torch_dtype")) == "bfloat16"
    assert load(tmp_path / "bf16").params["norm"]["weight"].dtype == jnp.bfloat16


# Rewards and the text task.


def _tied_decode_temp(stream: bool) -> int:
    """XLA's temp bytes for a bfloat16 decode of a narrow tied model with a wide vocabulary."""
    from jaxes.llm import CausalLM, from_dict

    config = from_dict(
        {
            "model_type": "qwen2", "vocab_size": 8192, "hidden_size": 16, "num_hidden_layers": 1,
            "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 32,
            "tie_word_embeddings": True,
        }
    )  # fmt: skip
    model = CausalLM(config, 16, jnp.bfloat16, stream)
    params = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, 1), jnp.int32)))
    params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, jnp.bfloat16), params)

    def decode(params, prompts):
        def apply_fn(tokens, cache, position):
            return model.apply(params, tokens, cache, position)

        return generate(apply_fn, model.init_cache(2), prompts, 8)

    prompts = jax.ShapeDtypeStruct((2, 8), jnp.int32)
    compiled = jax.jit(decode).lower(params, prompts).compile()
    return compiled.memory_analysis().temp_size_in_bytes


def test_a_streamed_tied_head_reads_the_table_once_its_query_exists():
    # Unstreamed, XLA hoists the table's converts out of the decode loops (on the CPU it
    # widens a bfloat16 dot to float32). Measured: 1.58 MB either way before the head was
    # streamed, 1.13 MB streamed after; 0.86 MB (unstreamed 1.32) once the streamed head read
    # the table as the integers of its bits; a float32 table is 0.52 MB.
    table = 8192 * 16 * 4
    assert _tied_decode_temp(stream=True) <= _tied_decode_temp(stream=False) - table // 2


def test_a_bfloat16_cache_is_held_as_its_bits_and_written_in_place():
    # XLA:CPU writes a slot of a bfloat16 array by widening the array to float32 and back:
    # with members vmapped (as sequence_task runs them), each decode step wrote a new cache
    # and copied it into the loop's (0.5B's plan held the KV caches 2.1 times over). Held as
    # the integers of its bits, the step writes the slot and copies nothing. Measured on the
    # CPU with jax 0.10.2: temp 14.96 MB against 12.99 MB, the members' keys 2.10 MB.
    from jaxes.llm import CausalLM, from_dict
    from jaxes.llm.decoder import LMCache

    config = from_dict(
        {
            "model_type": "qwen2", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 32,
            "tie_word_embeddings": True,
        }
    )  # fmt: skip
    model = CausalLM(config, 512, jnp.bfloat16)
    params = model.init(jax.random.key(0), jnp.zeros((1, 1), jnp.int32))
    members = jax.tree.map(lambda x: jnp.stack([x, x * 0.5, -x, x * 2]), params)
    bits = model.init_cache(8, jnp.bfloat16)
    assert bits.k.dtype == bits.v.dtype == jnp.uint16

    def decode(kind):
        def cache():
            if kind == "bits":
                return model.init_cache(8, jnp.bfloat16)
            return LMCache(*(jnp.zeros(x.shape, jnp.bfloat16) for x in bits[:2]), bits.start)

        def each(params):
            def apply_fn(tokens, c, position):
                return model.apply(params, tokens, c, position)

            return generate(apply_fn, cache(), prompts, 8)

        return jax.jit(lambda members: jax.vmap(each)(members))

    prompts = jax.random.randint(jax.random.key(1), (8, 4), 0, 64)
    temp = {
        kind: decode(kind).lower(members).compile().memory_analysis().temp_size_in_bytes
        for kind in ("bits", "values")
    }
    assert temp["bits"] < temp["values"] - 0.75 * 4 * bits.k.size * 2
    np.testing.assert_array_equal(decode("bits")(members), decode("values")(members))


def test_countdown_reward_is_one_for_a_right_equation_a_tenth_for_format_and_zero_else():
    problem = {"numbers": [4, 9, 11], "target": 25}
    assert countdown_reward(problem, "x </think>\n<answer>(11 - 9) * 4 + 9</answer>") == 0.1
    assert countdown_reward(problem, "</think> <answer>11 + 9 + 4</answer>") == 0.1  # 24
    assert countdown_reward(problem, "</think> <answer>4 * 9 - 11</answer>") == 1.0
    assert countdown_reward(problem, "</think> <answer>4 * 9 - 11 - 0</answer>") == 0.1
    assert countdown_reward(problem, "<answer>4 * 9 - 11</answer>") == 0.0  # no </think>
    assert countdown_reward(problem, "</think> <answer>__import__('os')</answer>") == 0.1
    assert countdown_reward(problem, "</think> <answer>4 / 0 + 9 + 11</answer>") == 0.1
    assert "[4, 9, 11]" in countdown_prompt(problem) and countdown_prompt(problem).endswith(
        "<think>"
    )


def test_numeric_reward_and_a_jsonl_file_of_problems(tmp_path):
    assert numeric_reward({"answer": "1,200"}, "The total is 1200.") == 1.0
    assert numeric_reward({"answer": 7}, "<answer>7</answer> and then 9") == 1.0
    assert numeric_reward({"answer": 7}, "maybe 8") == 0.0
    path = tmp_path / "p.jsonl"
    path.write_text('{"question": "2 + 2?", "answer": 4}\n\n{"question": "3 * 3?"}\n')
    with pytest.raises(ValueError, match='line 3 needs "question" and "answer"'):
        read_jsonl(path)
    path.write_text('{"question": "2 + 2?", "answer": 4}\n')
    assert read_jsonl(path) == [{"question": "2 + 2?", "answer": 4}]


def _task(pretrained, reward, **kwargs):
    problems = [{"question": q, "answer": a} for q, a in [("Hello", 1), ("The answer must", 2)]]
    return text_task(
        pretrained, problems, lambda p: p["question"], reward, answer_tokens=4, **kwargs
    )


def test_a_text_reward_sees_each_problem_and_its_decoded_completion(qwen2):
    seen = []

    def reward(problem, completion):
        seen.append((problem["question"], completion))
        return float(problem["answer"])

    lm = _task(qwen2, reward)
    returns = jax.jit(lm.task.evaluate_policy)(jax.random.key(0), lm.task.init_params(None), None)
    np.testing.assert_array_equal(returns, [1.0, 2.0])
    assert [q for q, _ in seen] == ["Hello", "The answer must"]
    assert all(isinstance(c, str) for _, c in seen)


def test_a_reward_that_raises_is_one_line_naming_the_prompt(qwen2):
    def reward(problem, completion):
        raise KeyError("score")

    lm = _task(qwen2, reward)
    with pytest.raises(Exception, match="RewardError"):
        jax.jit(lm.task.evaluate_policy)(jax.random.key(0), lm.task.init_params(None), None)
    assert lm.reward.failure.startswith(
        "reward: KeyError: 'score' on the prompt 'Hello' of problem {'question': 'Hello'"
    )
    assert "\n" not in lm.reward.failure
    assert issubclass(RewardError, ValueError)


def test_members_of_a_text_task_are_scored_factored_from_a_bfloat16_int8_base(qwen2):
    pretrained = load(FIXTURES / "qwen2-tied", dtype="bfloat16", cache_len=32)
    lm = _task(pretrained, lambda p, c: float(len(c)), quantize=True)
    es = jaxes.open_es(4, sigma=0.01, noise=jaxes.noise.lowrank(rank=1))
    state = es.init(jax.random.key(0), lm.task.init_params(None))
    assert jax.tree.leaves(state.params)[0].dtype == jnp.float32  # the float32 master

    def one(state, key):
        _, state = es.ask(key, state)
        centre = jaxes.centre(state)
        deltas = jax.vmap(lambda i: es.perturbation(state, i))(jnp.arange(4))
        fitness, _, info = lm.task.evaluate_factored(key, centre, deltas, None)
        return fitness, info

    fitness, info = jax.jit(one)(state, jax.random.key(1))
    assert fitness.shape == (4,) and bool(jnp.all(jnp.isfinite(fitness)))
    assert int(info.generated_tokens) == 4 * 2 * 4


def test_transformers_4s_rope_keys_read_the_same_as_5s(tmp_path):
    """Checkpoints saved by transformers 4 (most of the hub) spell RoPE's settings as
    top-level ``rope_theta`` and ``rope_scaling``; the fixtures were saved by transformers 5."""
    model = _copy(tmp_path, "llama3-tied")
    new = json.loads((model / "config.json").read_text())
    rope = dict(new.pop("rope_parameters"))
    old = {**new, "rope_theta": rope.pop("rope_theta"), "rope_scaling": rope}
    (model / "config.json").write_text(json.dumps(old))
    assert load(model).config == load(FIXTURES / "llama3-tied").config
    assert load(model).config.rope_scaling.factor == 8.0
    (model / "config.json").write_text(json.dumps({**old, "rope_scaling": {"rope_type": "yarn"}}))
    with pytest.raises(ModelError, match="rope_scaling of type 'yarn' is not supported"):
        load(model)
