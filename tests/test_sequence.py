"""The transformer's cached decode and the sequence task, against plain recomputation.

One tiny model and one set of shapes for every test, so each jitted function compiles once.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxes
from jaxes import parallel
from jaxes.factored.lowrank import LowRank
from jaxes.step import TrainState, generation_step
from jaxes.tasks.layers import Embed, embedding_bits, embedding_values
from jaxes.tasks.sequence import generate, prompt_batch, sequence_task
from jaxes.tasks.transformer import Transformer

VOCAB, TP, STEPS, MAX_LEN, BATCH, P = 12, 3, 4, 8, 4, 4
MODEL = Transformer(vocab=VOCAB, d_model=16, heads=2, layers=1, max_len=MAX_LEN)
POOL = jax.random.randint(jax.random.key(1), (6, TP), 0, VOCAB)
KEY = jax.random.key(7)


def init_params(key):
    return MODEL.init(key, jnp.zeros((1, 1), jnp.int32))["params"]


def reward(prompts, generated):
    # Almost any change of a token changes it, so equal fitness means equal tokens.
    weights = 1.0 + jnp.arange(generated.shape[1])
    return jnp.mean(generated == prompts[:, :1], axis=1) + jnp.sum(generated * weights, 1) / 64


PARAMS = jax.jit(init_params)(jax.random.key(0))
# Two members at a time: one device runs two chunks, each of two devices one.
TASK = sequence_task(MODEL, init_params, POOL, reward, STEPS, batch_size=BATCH, chunk_size=2)
# Low-rank noise, σ large enough that members generate different tokens.
ES = jaxes.open_es(P, sigma=0.5, noise=jaxes.noise.lowrank(2))


@jax.jit
def full_logits(params, tokens):
    return MODEL.apply({"params": params}, tokens)[0].astype(jnp.float32)


@functools.partial(jax.jit, static_argnames="temperature")
def cached_generate(params, prompts, key=None, temperature=0.0):
    def apply_fn(tokens, cache, position):
        return MODEL.apply({"params": params}, tokens, cache, position)

    cache = MODEL.init_cache(prompts.shape[0], jax.tree.leaves(params)[0].dtype)
    return generate(
        apply_fn, cache, prompts, STEPS, key=key, temperature=temperature, with_logits=True
    )


def loop_decode(params, prompts, key=None, temperature=0.0):
    """Decoding that recomputes the whole sequence, no cache, at every step (on a
    fixed-length buffer, so one compile: the causal mask hides the unwritten tail); greedy,
    or sampled with step ``s`` drawing from ``split(key, steps)[s]``."""
    sequence = np.zeros((prompts.shape[0], MAX_LEN), np.int32)
    sequence[:, :TP] = np.asarray(prompts)
    keys = None if key is None else jax.random.split(key, STEPS)
    logits = []
    for step in range(STEPS):
        row = np.asarray(full_logits(params, jnp.asarray(sequence)))[:, TP + step - 1]
        if temperature == 0.0:
            sequence[:, TP + step] = row.argmax(-1)
        else:
            sequence[:, TP + step] = jax.random.categorical(keys[step], row / temperature)
        logits.append(row)
    return sequence[:, TP : TP + STEPS], np.stack(logits, axis=1)


def leaves(tree):
    return [
        jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x
        for x in jax.tree.leaves(tree)
    ]


@jax.jit
def draw_population(params):
    start = ES.init(jax.random.key(2), params)
    _, state = ES.ask(jax.random.key(3), start)
    index = jnp.arange(P)
    members = jax.vmap(lambda i: ES.member(state, i))(index)
    deltas = jax.vmap(lambda i: ES.perturbation(state, i))(index)
    each = [ES.member(state, i) for i in range(P)]  # built alone, as a loop would
    return start, members, deltas, each


@pytest.fixture(scope="module")
def population():
    start, members, deltas, each = draw_population(PARAMS)
    fitness, _, info = jax.jit(TASK.evaluate)(KEY, members, None)
    return start, members, deltas, each, fitness, info


def test_cached_decode_equals_recomputing_the_whole_sequence_every_step():
    prompts = POOL[:BATCH]
    tokens, logits = cached_generate(PARAMS, prompts)
    ref_tokens, ref_logits = loop_decode(PARAMS, prompts)
    np.testing.assert_array_equal(tokens, ref_tokens)
    np.testing.assert_allclose(logits, ref_logits, atol=2e-5, rtol=1e-5)
    assert len(np.unique(np.asarray(tokens))) > 1  # not a degenerate, constant model


def test_sampled_decode_equals_the_recomputing_loop_with_the_same_keys():
    prompts, key = POOL[:BATCH], jax.random.key(5)
    tokens, logits = cached_generate(PARAMS, prompts, key, temperature=1.5)
    ref_tokens, ref_logits = loop_decode(PARAMS, prompts, key, temperature=1.5)
    np.testing.assert_array_equal(tokens, ref_tokens)
    np.testing.assert_allclose(logits, ref_logits, atol=2e-5, rtol=1e-5)
    greedy, _ = cached_generate(PARAMS, prompts)
    assert not np.array_equal(tokens, greedy)  # it did sample


def test_bfloat16_params_decode_with_a_bfloat16_cache_close_to_the_full_forward():
    params = jax.tree.map(lambda x: x.astype(jnp.bfloat16), PARAMS)
    prompts = POOL[:BATCH]
    tokens, logits = cached_generate(params, prompts)
    sequence = jnp.zeros((BATCH, MAX_LEN), jnp.int32).at[:, :TP].set(prompts)
    sequence = sequence.at[:, TP : TP + STEPS].set(tokens)
    # Teacher-forced on the tokens the cache chose: bf16 rounding may flip a near-tie.
    ref = full_logits(params, sequence)[:, TP - 1 : TP + STEPS - 1]
    f32 = full_logits(PARAMS, sequence)[:, TP - 1 : TP + STEPS - 1]
    # Measured: 0.0 and 0.021 (logits up to 2.9, where a bf16 step is 0.016).
    np.testing.assert_allclose(logits, ref, atol=0.02)
    np.testing.assert_allclose(logits, f32, atol=0.05)
    _, cache = MODEL.apply({"params": params}, prompts, MODEL.init_cache(BATCH, jnp.bfloat16), 0)
    assert cache.k.dtype == cache.v.dtype == jnp.bfloat16


def test_a_bfloat16_model_on_float32_params_is_the_bfloat16_params_model_bit_for_bit(population):
    # Each layer rounds its float32 weight where it reads it (flax's mixed precision): the
    # same numbers as rounding the whole tree first, with no bfloat16 copy of the model.
    narrow = jax.tree.map(lambda x: x.astype(jnp.bfloat16), PARAMS)
    wide = jax.tree.map(lambda x: x.astype(jnp.float32), narrow)
    model = MODEL.clone(dtype=jnp.bfloat16)
    tokens = POOL[:BATCH]
    mixed = jax.jit(lambda p: model.apply({"params": p}, tokens)[0])(wide)
    assert mixed.dtype == jnp.bfloat16
    np.testing.assert_array_equal(mixed, full_logits(narrow, tokens).astype(jnp.bfloat16))
    deltas = population[2]
    task = sequence_task(model, init_params, POOL, reward, STEPS, batch_size=BATCH, chunk_size=2)
    fitness, _, _ = jax.jit(task.evaluate_factored)(KEY, wide, deltas, None)
    expected, _, _ = jax.jit(TASK.evaluate_factored)(KEY, narrow, deltas, None)
    np.testing.assert_array_equal(fitness, expected)
    assert len(set(np.asarray(fitness).tolist())) > 1  # the members differ


def test_streamed_weights_change_no_bit_of_logits_fitness_or_gradient(population):
    streamed = MODEL.clone(stream_weights=True)
    tokens = POOL[:BATCH]
    logits = jax.jit(lambda p: streamed.apply({"params": p}, tokens)[0])(PARAMS)
    np.testing.assert_array_equal(logits, full_logits(PARAMS, tokens))
    task = sequence_task(streamed, init_params, POOL, reward, STEPS, batch_size=BATCH, chunk_size=2)
    fitness, _, _ = jax.jit(task.evaluate_factored)(KEY, PARAMS, population[2], None)
    expected, _, _ = jax.jit(TASK.evaluate_factored)(KEY, PARAMS, population[2], None)
    np.testing.assert_array_equal(fitness, expected)

    def gradient(model):  # backprop (GRPO's path) sees the tie as the identity
        loss = lambda p: jnp.sum(model.apply({"params": p}, tokens)[0] ** 2)  # noqa: E731
        return jax.jit(jax.grad(loss))(PARAMS)

    got, want = gradient(streamed), gradient(MODEL)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(a, b)


def _decode_temp(model, params) -> int:
    """XLA's temp bytes for an 8-token decode of 2 prompts (compiled, never run)."""
    prompts = jax.ShapeDtypeStruct((2, 8), jnp.int32)

    def decode(params, prompts):
        def apply_fn(tokens, cache, position):
            return model.apply({"params": params}, tokens, cache, position)

        return generate(apply_fn, model.init_cache(2, jnp.bfloat16), prompts, 8)

    return jax.jit(decode).lower(params, prompts).compile().memory_analysis().temp_size_in_bytes


def test_a_streamed_bfloat16_model_reading_float32_params_decodes_without_a_copy_of_the_model():
    model = Transformer(vocab=256, d_model=128, heads=4, layers=2, max_len=16)
    wide = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, 1), jnp.int32)))
    wide = wide["params"]
    narrow = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, jnp.bfloat16), wide)
    n = sum(x.size for x in jax.tree.leaves(wide))
    copied = _decode_temp(model, narrow)  # a bfloat16 copy of the model, read by every step
    mixed = _decode_temp(model.clone(dtype=jnp.bfloat16), wide)
    streamed = _decode_temp(model.clone(dtype=jnp.bfloat16, stream_weights=True), wide)
    # Without the tie XLA converts every weight ahead of the loop (on the CPU, to float32:
    # 4 bytes a parameter); with it one layer's at a time. Measured on the CPU with jax 0.10.2:
    # 4.20, 3.89 and 0.70 B/param (0.74 when this test was written). The head and each
    # embedding table are 7 % of this model: a head left unstreamed, or an embedding that
    # rounds its whole table, measures 0.99 and 1.00 B/param, which only the absolute bound
    # catches (0.85: 0.15 B/param of margin).
    assert streamed <= min(copied, mixed) - 2 * n
    assert streamed <= 0.85 * n


def test_a_bfloat16_embedding_rounds_the_rows_it_looks_up_not_its_table():
    # In a loop, as in a decode: a rounded table would be converted once, ahead of the loop,
    # and held through it (on the CPU as a float32 copy of its bfloat16 rounding: 1 MB here).
    # Measured: 132 temp bytes; rounding the table, 1,048,708.
    layer = Embed(4096, 64, dtype=jnp.bfloat16)
    table = {"embedding": jax.ShapeDtypeStruct((4096, 64), jnp.float32)}

    def lookups(params, tokens):
        def step(total, t):
            return total + layer.apply({"params": params}, t), None

        return jax.lax.scan(step, jnp.zeros((2, 64), jnp.bfloat16), tokens)[0]

    lowered = jax.jit(lookups).lower(table, jax.ShapeDtypeStruct((8, 2), jnp.int32))
    assert "tensor<4096x64xbf16>" not in lowered.as_text()  # no rounded table in the program
    assert lowered.compile().memory_analysis().temp_size_in_bytes < 4096 * 64 * 2 / 64


def _tied_steps(stream: bool, rows: int = 65536):
    """A decode-shaped loop over a bfloat16 table (a checkpoint's frozen one): each step looks
    up a row and reads the table as the tied head (65,536 rows: eight blocks)."""
    layer = Embed(rows, 64, dtype=jnp.bfloat16, stream=stream)

    def steps(params, tokens):
        def step(_, t):
            rows = layer.apply({"params": params}, t)
            return None, layer.apply({"params": params}, rows, method="attend")

        return jax.lax.scan(step, None, tokens)[1]

    return steps


def test_a_streamed_tied_head_over_a_bfloat16_table_holds_no_float32_copy_of_it():
    # XLA:CPU widens a bfloat16 gather, slice or dot to float32, and hoists the widening of
    # the whole table out of the loop: the Qwen2.5-0.5B plan held two float32 copies of its
    # table (1.1 bytes/param each). Streamed, the table is sliced as integers and read in
    # blocks. Measured on the CPU with jax 0.10.2, in float32 tables' sizes: 2.0 unstreamed
    # (two float32 copies), 0.14 streamed (one block's float32 copy is 0.125); with the blocks
    # sliced as bfloat16, not as integers, 1.14 (the widening of the table is hoisted whole).
    table = {"embedding": jax.ShapeDtypeStruct((65536, 64), jnp.bfloat16)}
    tokens = jax.ShapeDtypeStruct((8, 2), jnp.int32)
    temp = {
        stream: jax.jit(_tied_steps(stream)).lower(table, tokens).compile().memory_analysis()
        for stream in (False, True)
    }
    float32_table = 65536 * 64 * 4
    assert temp[False].temp_size_in_bytes > float32_table  # what the test guards against
    assert temp[True].temp_size_in_bytes < 0.5 * float32_table
    values = {"embedding": jax.random.normal(KEY, (65536, 64), jnp.bfloat16)}
    ids = jax.random.randint(KEY, (8, 2), 0, 65536)
    streamed, whole = (jax.jit(_tied_steps(s))(values, ids) for s in (True, False))
    # The same products; the matmul kernel of a block may sum them in another order than the
    # whole table's: a bfloat16 rounding apart (logits here are about 8 in size; the absolute
    # term is for sums that cancel to near zero).
    np.testing.assert_allclose(streamed.astype(float), whole.astype(float), rtol=2**-7, atol=2**-6)


def test_a_table_held_as_its_bits_reads_the_same_and_costs_no_view_of_itself():
    # A bfloat16 table's integer view is whole-table and loop-invariant: XLA hoists it out of
    # the decode loop and, with its fusion emitters (XLA:CPU's default; the runner turns
    # them off), holds it, a copy of the table (0.55 bytes/param at Qwen2.5 0.5B). A frozen
    # table handed over as its bits (embedding_bits) has none. Measured on the CPU with
    # jax 0.10.2, in bfloat16 tables' sizes: 1.29 from a bfloat16 table, 0.29 from its bits.
    table = {"embedding": jax.ShapeDtypeStruct((65536, 64), jnp.bfloat16)}
    tokens = jax.ShapeDtypeStruct((8, 2), jnp.int32)
    steps = jax.jit(_tied_steps(True))
    temp = {
        name: steps.lower(tree, tokens)
        .compile(compiler_options={"xla_cpu_use_fusion_emitters": True})
        .memory_analysis()
        .temp_size_in_bytes
        for name, tree in (("values", table), ("bits", jax.eval_shape(embedding_bits, table)))
    }
    assert temp["values"] - temp["bits"] > 0.9 * 65536 * 64 * 2
    values = {"embedding": jax.random.normal(KEY, (4096, 64), jnp.bfloat16)}
    bits = embedding_bits(values)
    assert bits["embedding"].dtype == jnp.uint16
    np.testing.assert_array_equal(embedding_values(bits)["embedding"], values["embedding"])
    ids = jax.random.randint(KEY, (8, 2), 0, 4096)
    for stream in (False, True):
        got, want = (jax.jit(_tied_steps(stream, 4096))(t, ids) for t in (bits, values))
        np.testing.assert_array_equal(got, want)

    # Frozen bits carry no gradient, and take none from the rest: a loss through the lookup
    # and the head differentiates in the query as with the bfloat16 table.
    def loss(scale, tree):
        layer = Embed(4096, 64, stream=True)
        rows = layer.apply({"params": tree}, ids) * scale
        return jnp.sum(layer.apply({"params": tree}, rows, method="attend").astype(float) ** 2)

    scale = jnp.float32(0.5)
    assert jax.grad(loss)(scale, bits) == jax.grad(loss)(scale, values) != 0


@pytest.mark.parametrize("stream", [False, True])
def test_a_bfloat16_tables_gradient_passes_through_the_integer_slicing(stream):
    # The rows are gathered and sliced as the integers of their bits, which carry no
    # gradient: without its own tangent rule a bfloat16 table's gradient was silently zero
    # through the lookup and the streamed head (backprop: GRPO, pre-training in bfloat16).
    layer = Embed(40, 8, stream=stream)
    table = jax.random.normal(KEY, (40, 8)).astype(jnp.bfloat16)
    ids = jnp.array([[1, 2, 3]])

    def loss(table, plain):
        if plain:
            logits = jnp.dot(jnp.take(table, ids, axis=0), table.T)
        else:
            rows = layer.apply({"params": {"embedding": table}}, ids)
            logits = layer.apply({"params": {"embedding": table}}, rows, method="attend")
        return jnp.sum(logits.astype(jnp.float32) ** 2)

    got, want = (jax.grad(loss)(table, plain) for plain in (False, True))
    assert float(jnp.abs(want.astype(jnp.float32)).sum()) > 0
    np.testing.assert_array_equal(got, want)


def test_the_prefill_computes_no_logits_at_the_prompt_positions():
    # A wide vocabulary on a narrow model: logits at every prompt position would be
    # 64 prompts x 63 positions x 4096 x 4 bytes = 66 MB, far beyond everything else.
    model = Transformer(vocab=4096, d_model=8, heads=1, layers=1, max_len=72)
    params = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, 1), jnp.int32)))
    prompts = jax.ShapeDtypeStruct((64, 64), jnp.int32)

    def decode(params, prompts):
        def apply_fn(tokens, cache, position):
            return model.apply({"params": params}, tokens, cache, position)

        return generate(apply_fn, model.init_cache(64), prompts, 8)

    compiled = jax.jit(decode).lower(params["params"], prompts).compile()
    assert compiled.memory_analysis().temp_size_in_bytes < 64 * 63 * 4096 * 4 / 8


def test_fitness_is_each_members_decode_scored_by_the_reward(population):
    _, _, _, each, fitness, info = population
    batch = prompt_batch(jax.random.split(KEY)[0], POOL, BATCH)
    expected = []
    for member in each:
        tokens, _ = loop_decode(member, batch)
        expected.append(float(jnp.mean(reward(batch, jnp.asarray(tokens)))))
    np.testing.assert_allclose(fitness, expected, rtol=1e-6)
    assert len(set(expected)) > 1  # members differ, so the comparison tells them apart
    assert (int(info.evaluations), int(info.generated_tokens)) == (P, P * BATCH * STEPS)


def test_factored_members_give_the_materialised_members_fitness(population):
    _, _, deltas, _, fitness, info = population
    leaves = jax.tree.leaves(deltas, is_leaf=lambda x: isinstance(x, LowRank))
    assert any(isinstance(leaf, LowRank) for leaf in leaves)  # kept factored
    factored_fitness, _, factored_info = jax.jit(TASK.evaluate_factored)(KEY, PARAMS, deltas, None)
    np.testing.assert_allclose(factored_fitness, fitness, rtol=1e-6)
    assert factored_info == info


def test_the_device_split_gives_the_one_device_generation(population):
    ts = TrainState(population[0], None, KEY, jnp.zeros((), jnp.int32))
    one, one_metrics = jax.jit(generation_step(ES, TASK))(ts)
    mesh = parallel.make_mesh(2)
    placed = jax.device_put(ts, parallel.replicated(mesh))
    split, split_metrics = jax.block_until_ready(
        jax.jit(parallel.sharded_step(ES, TASK, mesh))(placed)
    )
    for a, b in zip(leaves(one.strategy_state), leaves(split.strategy_state), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    assert one_metrics.keys() == split_metrics.keys()
    for name in one_metrics:
        np.testing.assert_allclose(one_metrics[name], split_metrics[name], rtol=1e-6)
    assert int(split_metrics["evaluations"]) == P


def test_bad_tokens_and_positions_name_the_argument():
    # The model's own embeddings look rows up themselves, so flax's check is theirs to make.
    with pytest.raises(ValueError, match="^tokens: expected integer token ids, got float32"):
        jax.eval_shape(full_logits, PARAMS, jnp.ones((1, 3)))
    cache = MODEL.init_cache(1)
    with pytest.raises(ValueError, match="^position: 3 tokens at position 6 do not fit"):
        MODEL.apply({"params": PARAMS}, POOL[:1], cache, 6)


def test_a_reward_of_the_wrong_shape_names_the_expected_one(population):
    _, members, deltas, _, _, _ = population
    task = sequence_task(
        MODEL, init_params, POOL, lambda p, g: reward(p, g)[:, None], STEPS, batch_size=BATCH
    )
    with pytest.raises(ValueError, match=r"^reward_fn: expected shape \(4,\)"):
        jax.eval_shape(task.evaluate, KEY, members, None)
    with pytest.raises(ValueError, match=r"^reward_fn: expected shape \(4,\)"):
        jax.eval_shape(task.evaluate_factored, KEY, PARAMS, deltas, None)
