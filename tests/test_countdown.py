"""The Countdown reward (jaxes_examples.countdown.problems): exact answers score 1, anything
else 0, bad shapes fail with a message. Plain jnp on small arrays: nothing here compiles more
than tiny element-wise programs."""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest

from jaxes_examples.countdown import problems as countdown
from jaxes_examples.countdown.corpus import corpus
from jaxes_examples.countdown.problems import EOS, PAD, PLUS, encode_answer, encode_prompt, reward


def test_every_solution_of_every_problem_scores_one_and_every_other_expression_zero():
    prompts, answers, expected = [], [], []
    for a, b, t in countdown.problems().tolist():
        right = set(countdown.solutions(a, b, t))
        assert right, (a, b, t)  # every problem has an answer
        for x, y in ((a, b), (b, a)):
            for op in "+-*":
                prompts.append(encode_prompt(a, b, t))
                answers.append(encode_answer(x, op, y))
                expected.append(float(f"{x} {op} {y}" in right))
    got = np.asarray(reward(np.stack(prompts), np.stack(answers)))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.array(expected, np.float32))
    assert 0 < got.mean() < 1


def test_ill_formed_answers_score_zero():
    prompt = encode_prompt(3, 4, 7)
    bad = [
        [3, PLUS, 5, EOS],  # a number not given
        [3, PLUS, 3, EOS],  # one number twice
        [3, PLUS, 4, PAD],  # no EOS
        [3, 4, PLUS, EOS],  # not x op y
        [PLUS, 3, 4, EOS],
        [13, PLUS, 4, EOS],  # a non-digit where a number goes
        [3, EOS, 4, EOS],
    ]
    prompts = np.stack([prompt] * len(bad))
    assert reward(prompts, np.array(bad)).tolist() == [0.0] * len(bad)
    assert reward(prompts, np.array(bad), partial=True).tolist() == [0.0] * len(bad)
    # Tokens after the answer are ignored.
    tail = np.array([[3, PLUS, 4, EOS, 9, 9]])
    assert reward(prompt[None], tail).tolist() == [1.0]


def test_stretched_answers_need_every_copy():
    prompt = encode_prompt(6, 2, 12)[None]
    right = encode_answer(6, "*", 2, stretch=2)
    assert reward(prompt, right[None], stretch=2).tolist() == [1.0]
    broken = right.copy()
    broken[1] = 5  # one copy of x wrong
    assert reward(prompt, broken[None], stretch=2).tolist() == [0.0]
    # The unstretched answer read as stretched is wrong, and the other way round.
    assert reward(prompt, encode_answer(6, "*", 2)[None], 1).tolist() == [1.0]
    assert reward(prompt, right[None], 1).tolist() == [0.0]


def test_partial_credit_is_for_well_formed_misses_only():
    prompt = encode_prompt(5, 3, 2)[None]
    assert reward(prompt, encode_answer(5, "+", 3)[None], partial=True).tolist() == [
        pytest.approx(0.1)
    ]
    assert reward(prompt, encode_answer(5, "-", 3)[None], partial=True).tolist() == [1.0]


def test_wrong_shapes_fail_clearly():
    prompts = np.stack([encode_prompt(1, 2, 3)] * 2)
    with pytest.raises(ValueError, match=r"tokens: expected \(2, T >= 4\)"):
        reward(prompts, np.zeros((2, 3), np.int32))
    with pytest.raises(ValueError, match=r"tokens: expected \(2, T >= 4\)"):
        reward(prompts, np.zeros((3, 4), np.int32))
    with pytest.raises(ValueError, match=r"tokens: expected \(2, T >= 8\)"):
        reward(prompts, np.zeros((2, 4), np.int32), stretch=2)
    with pytest.raises(ValueError, match=r"prompts: expected \(N, 7\)"):
        reward(prompts[:, :5], np.zeros((2, 4), np.int32))
    with pytest.raises(ValueError, match="encode_prompt"):
        encode_prompt(1, 2, 100)


def test_split_holds_out_whole_number_pairs_and_covers_every_problem():
    train, test = countdown.split(0)
    assert len(train) + len(test) == len(countdown.problems())

    def pairs(rows):
        return {(min(a, b), max(a, b)) for a, b, _ in rows.tolist()}

    assert not pairs(train) & pairs(test)
    assert countdown.split(0)[1].tolist() == test.tolist()  # the seed fixes it
    assert countdown.split(1)[1].tolist() != test.tolist()


def test_corpus_does_not_teach_which_expression_reaches_the_target():
    tokens, mask = corpus(0, 4000)
    tokens, mask = np.asarray(tokens), np.asarray(mask)
    fmt = tokens[tokens[:, 3] == countdown.SEP]  # the answer-format rows
    assert len(fmt) == 2000 and np.all(mask[len(tokens) - 2000 :, :7] == 0)
    prompts, answers = fmt[:, :7], fmt[:, 7:]
    # Every answer is well formed over the prompt's numbers ...
    assert np.all(np.asarray(reward(prompts, answers, partial=True)) > 0)
    # ... and rarely right: the target was drawn from another problem, independently of the
    # answer (measured 0.045 of 2000), so the corpus holds no Countdown answers to copy.
    assert float(jnp.mean(reward(prompts, answers))) < 0.1


# ---------------------------------------------------------------- three numbers


def test_three_number_solutions_score_one_and_every_other_expression_zero():
    rows = countdown.problems(3)
    sample = rows[np.random.default_rng(0).choice(len(rows), 150, replace=False)]
    prompts, answers, expected = [], [], []
    for a, b, c, t in sample.tolist():
        right = set(countdown.solutions(a, b, c, t))
        assert right, (a, b, c, t)
        for x, y, z in itertools.permutations((a, b, c)):
            for o1, o2 in itertools.product("+-*", repeat=2):
                prompts.append(encode_prompt(a, b, c, t))
                answers.append(encode_answer(x, o1, y, o2, z))
                expected.append(float(f"{x} {o1} {y} {o2} {z}" in right))
    got = np.asarray(reward(np.stack(prompts), np.stack(answers)))
    np.testing.assert_array_equal(got, np.array(expected, np.float32))
    assert 0 < got.mean() < 1
    # Read left to right, and each number used once.
    prompt = encode_prompt(2, 3, 4, 20)[None]
    assert reward(prompt, encode_answer(2, "+", 3, "*", 4)[None]).tolist() == [1.0]
    assert reward(prompt, encode_answer(2, "+", 2, "*", 5)[None]).tolist() == [0.0]
    assert reward(prompt, encode_answer(2, "*", 3, "+", 4)[None], partial=True).tolist() == [
        pytest.approx(0.1)
    ]


def test_three_number_test_set_is_2000_problems_over_sets_never_trained_on():
    train, test = countdown.split(0, numbers=3, test_size=countdown.TEST_PROBLEMS)
    assert test.shape == (2000, 4) and len(np.unique(test, axis=0)) == 2000
    assert not countdown.number_sets(train) & countdown.number_sets(test)
    everything = {tuple(r) for r in countdown.problems(3).tolist()}
    assert {tuple(r) for r in test.tolist()} <= everything
    again = countdown.split(0, numbers=3, test_size=countdown.TEST_PROBLEMS)
    assert again[1].tolist() == test.tolist()  # the seed fixes it


def test_three_number_pretraining_never_shows_a_held_out_set_of_numbers():
    train, test = countdown.split(0, numbers=3, test_size=countdown.TEST_PROBLEMS)
    held = countdown.number_sets(test)
    tokens, mask = (np.asarray(x) for x in corpus(0, 3000, numbers=3))
    assert tokens.shape == (3000, 14) and mask.shape == tokens.shape
    long_eq = tokens[tokens[:, 6] == countdown.EQUALS]  # BOS x op y op z =
    fmt = tokens[tokens[:, 4] == countdown.SEP]  # BOS a b c |
    assert len(long_eq) == 1000 and len(fmt) == 1000
    seen = countdown.number_sets(long_eq[:, [1, 3, 5, 0]])
    seen |= countdown.number_sets(fmt[:, [1, 2, 3, 0]])
    assert seen and not seen & held
    assert seen <= countdown.number_sets(train)
    # Every three-number equation is right, and every format answer well formed.
    terms, ops = long_eq[:, [1, 3, 5]], long_eq[:, [2, 4]]
    value = countdown.evaluate(terms.T, ops.T)
    np.testing.assert_array_equal(value, long_eq[:, 7] * 10 + long_eq[:, 8])
    assert np.all(np.asarray(reward(fmt[:, :8], fmt[:, 8:], partial=True)) > 0)


def test_bad_numbers_fail_clearly():
    with pytest.raises(ValueError, match="numbers: expected 2 or 3"):
        countdown.problems(4)
    with pytest.raises(ValueError, match="test_size"):
        countdown.split(0, numbers=3, test_size=10**6)
    with pytest.raises(ValueError, match=r"prompts: expected \(N, 7\) tokens \(two numbers\)"):
        reward(np.zeros((2, 9), np.int32), np.zeros((2, 8), np.int32))


def test_pretrained_params_are_cached_by_setup_and_rebuilt_when_damaged(tmp_path, monkeypatch):
    import jax

    from jaxes_examples.countdown import pretrain

    monkeypatch.setenv("JAXES_PRETRAINED_DIR", str(tmp_path))
    # The doctest's setup in pretrain.pretrain: the same shapes, so the same compiled program.
    setup = pretrain.Setup(
        d_model=8, heads=2, layers=1, pretrain_steps=2, corpus_size=64, pretrain_batch=8
    )
    first = pretrain.pretrained(setup)
    assert not first["cached"] and first["path"].parent == tmp_path
    again = pretrain.pretrained(setup)
    assert again["cached"] and again["path"] == first["path"]
    leaves = zip(jax.tree.leaves(first["params"]), jax.tree.leaves(again["params"]), strict=True)
    for a, b in leaves:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert pretrain.cache_path(pretrain.Setup(seed=1)) != pretrain.cache_path(pretrain.Setup())
    first["path"].write_bytes(b"damaged")
    rebuilt = pretrain.pretrained(setup)
    assert not rebuilt["cached"] and list(tmp_path.iterdir()) == [first["path"]]
