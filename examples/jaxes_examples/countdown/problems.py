"""Countdown in miniature: write an expression over the given numbers that reaches the target.

A self-contained sequence task for fine-tuning a small language model (``jaxes.tasks.
transformer``) on a reward that has no gradient: nothing is downloaded, every array is built
here from a seed.

* **Vocabulary** (``VOCAB`` = 18 tokens): the digits ``0``-``9`` are tokens 0-9, then ``+``,
  ``-``, ``*``, ``=``, the separator ``|``, ``BOS``, ``EOS`` and ``PAD``.
* **Problems**: two one-digit numbers ``a, b`` (1-9) and a target ``t`` that one of
  ``a + b``, ``a * b``, ``a - b`` or ``b - a`` reaches (targets 0-81; a subtraction whose
  result would be negative is not allowed). ``problems()`` lists all 242 of them; ``split``
  holds out every problem over a quarter of the number pairs.
* **Prompt**: ``BOS a b | t₁ t₀ |`` (7 tokens, the target as two digits).
* **Answer**: ``x op y EOS`` with ``{x, y} = {a, b}``, ``op`` one of ``+ - *``, and with
  ``stretch = k`` every answer token written ``k`` times (``4k`` tokens): the same problem with
  a longer answer, for measuring how ES's progress depends on the length generated.
* ``reward(prompts, tokens)``: 1 for a well-formed answer over exactly the given numbers whose
  value is the target, else 0 (``partial=True`` adds 0.1 for a well-formed answer over the
  given numbers that misses).
* **Pre-training corpus** (``corpus``), for backprop, never showing which expression reaches
  a target: (1) equations ``BOS x op y = c₁ c₀ EOS`` over the digits 0-9 (how expressions
  evaluate), and (2) the answer format, ``prompt answer`` with an answer over the prompt's
  numbers but a target drawn independently of it, so the model learns to write an expression
  over the given numbers and cannot learn from the corpus which one is right.

Example:
  >>> import jax.numpy as jnp
  >>> prompt = encode_prompt(3, 4, 12)
  >>> decode(prompt)
  'BOS 3 4 | 1 2 |'
  >>> answer = encode_answer(3, "*", 4)
  >>> decode(answer)
  '3 * 4 EOS'
  >>> reward(prompt[None], answer[None]).tolist()
  [1.0]
  >>> reward(prompt[None], encode_answer(3, "+", 4)[None]).tolist()
  [0.0]
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

DIGITS = 10
PLUS, MINUS, TIMES, EQUALS, SEP, BOS, EOS, PAD = range(DIGITS, DIGITS + 8)
VOCAB = DIGITS + 8
OPS = {"+": PLUS, "-": MINUS, "*": TIMES}
NAMES = [str(d) for d in range(DIGITS)] + ["+", "-", "*", "=", "|", "BOS", "EOS", "PAD"]
PROMPT_LEN = 7
ANSWER_LEN = 4  # x op y EOS, before stretching
EQUATION_LEN = 8  # BOS x op y = c1 c0 EOS


def answer_len(stretch: int = 1) -> int:
    """Tokens in an answer written with every token ``stretch`` times.

    Example:
      >>> answer_len(1), answer_len(4)
      (4, 16)
    """
    return ANSWER_LEN * int(stretch)


def apply_op(x, op: int, y):
    """``x op y`` for an op token (``PLUS``, ``MINUS``, ``TIMES``); numpy or jax arrays.

    Example:
      >>> int(apply_op(7, MINUS, 3)), int(apply_op(7, TIMES, 3))
      (4, 21)
    """
    return np.where(op == PLUS, x + y, np.where(op == MINUS, x - y, x * y))


def decode(tokens) -> str:
    """The tokens as text, space-separated.

    Example:
      >>> decode([15, 1, 2, 14])
      'BOS 1 2 |'
    """
    return " ".join(NAMES[int(t)] for t in np.asarray(tokens).reshape(-1))


def encode_prompt(a: int, b: int, target: int) -> np.ndarray:
    """``BOS a b | t₁ t₀ |`` as ``(7,)`` int32 tokens (the target as two digits, 0-99).

    Example:
      >>> encode_prompt(2, 9, 7).tolist()
      [15, 2, 9, 14, 0, 7, 14]
    """
    if not (0 <= target <= 99 and 0 <= a <= 9 and 0 <= b <= 9):
        raise ValueError(f"encode_prompt: numbers 0-9 and a target 0-99, got {a}, {b}, {target}")
    return np.array([BOS, a, b, SEP, target // 10, target % 10, SEP], np.int32)


def encode_answer(x: int, op: str, y: int, stretch: int = 1) -> np.ndarray:
    """``x op y EOS`` as ``(4 * stretch,)`` int32 tokens, each written ``stretch`` times.

    Example:
      >>> encode_answer(5, "-", 2, stretch=2).tolist()
      [5, 5, 11, 11, 2, 2, 16, 16]
    """
    return np.repeat(np.array([x, OPS[op], y, EOS], np.int32), int(stretch))


def problems() -> np.ndarray:
    """Every problem, ``(242, 3)`` int32 rows ``(a, b, target)``: ``a, b`` in 1-9 and each
    distinct non-negative value of ``a + b``, ``a * b``, ``a - b``, ``b - a`` as a target.

    Example:
      >>> p = problems()
      >>> p.shape, p[:3].tolist()
      ((242, 3), [[1, 1, 0], [1, 1, 1], [1, 1, 2]])
    """
    rows = []
    for a in range(1, 10):
        for b in range(1, 10):
            targets = {a + b, a * b, a - b, b - a}
            rows += [(a, b, t) for t in sorted(targets) if t >= 0]
    return np.array(rows, np.int32)


def split(seed: int = 0, held_out: float = 0.25) -> tuple[np.ndarray, np.ndarray]:
    """``problems()`` cut into ``(train, held_out)`` problem rows by their pair of numbers:
    a ``held_out`` fraction of the 45 unordered pairs ``{a, b}``, drawn with ``seed``, and
    every problem over them (in either order, any target) are held out, so a held-out
    problem's numbers never appear together in training (remembering which op a training
    pair wanted cannot pass for solving it).

    Example:
      >>> train, test = split(0)
      >>> train.shape, test.shape
      ((176, 3), (66, 3))
      >>> pairs = lambda rows: {(min(a, b), max(a, b)) for a, b, _ in rows.tolist()}
      >>> len(pairs(test)), pairs(train) & pairs(test)
      (11, set())
    """
    rows = problems()
    pairs = np.sort(rows[:, :2], axis=1)
    unique = np.unique(pairs, axis=0)
    order = np.random.default_rng(seed).permutation(len(unique))
    chosen = unique[order[: int(round(held_out * len(unique)))]]
    test = np.any(np.all(pairs[:, None, :] == chosen[None], axis=2), axis=1)
    return rows[~test], rows[test]


def prompts_of(rows) -> jax.Array:
    """The prompts ``(N, 7)`` of problem rows ``(a, b, target)``.

    Example:
      >>> prompts_of(problems()[:2]).shape
      (2, 7)
    """
    return jnp.asarray(np.stack([encode_prompt(*map(int, r)) for r in np.asarray(rows)]))


def solutions(a: int, b: int, target: int) -> list[str]:
    """The answers that score 1, as text (for reading results).

    Example:
      >>> solutions(2, 2, 4)
      ['2 + 2', '2 * 2']
    """
    out = []
    for x, y in dict.fromkeys([(a, b), (b, a)]):
        for name, op in OPS.items():
            if int(apply_op(x, op, y)) == target:
                out.append(f"{x} {name} {y}")
    return out


def reward(prompts, tokens, stretch: int = 1, partial: bool = False) -> jax.Array:
    """``(N,)`` float32: 1 where ``tokens`` is an exact answer to ``prompts``, else 0.

    Exact: the first ``4 * stretch`` tokens are ``x op y EOS`` with every token written
    ``stretch`` times, ``x, y`` digits that are the prompt's two numbers in either order,
    ``op`` one of ``+ - *`` and ``x op y`` the target. Tokens after the answer are ignored.
    With ``partial``, a well-formed answer over the prompt's numbers that misses the target
    scores 0.1 (a shaping variant; accuracy is always the exact reward).

    Args:
      prompts: ``(N, 7)`` int tokens (``encode_prompt``).
      tokens: ``(N, T)`` int tokens generated after them, ``T >= 4 * stretch``.
      stretch: how many times each answer token is written.
      partial: give 0.1 to well-formed misses.

    Example:
      >>> import numpy as np
      >>> p = np.stack([encode_prompt(3, 5, 2)] * 4)
      >>> t = np.stack([encode_answer(5, "-", 3), encode_answer(3, "-", 5),
      ...               encode_answer(5, "-", 4), np.array([5, 11, 3, 5])])
      >>> reward(p, t).tolist(), reward(p, t, partial=True).tolist()
      ([1.0, 0.0, 0.0, 0.0], [1.0, 0.10000000149011612, 0.0, 0.0])
    """
    prompts, tokens = jnp.asarray(prompts), jnp.asarray(tokens)
    stretch = int(stretch)
    if prompts.ndim != 2 or prompts.shape[1] != PROMPT_LEN:
        raise ValueError(f"prompts: expected (N, {PROMPT_LEN}) tokens, got shape {prompts.shape}")
    length = answer_len(stretch)
    if tokens.ndim != 2 or tokens.shape[0] != prompts.shape[0] or tokens.shape[1] < length:
        raise ValueError(
            f"tokens: expected ({prompts.shape[0]}, T >= {length}) tokens for "
            f"{prompts.shape[0]} prompts and stretch {stretch}, got shape {tokens.shape}"
        )
    answer = tokens[:, :length].reshape(tokens.shape[0], ANSWER_LEN, stretch)
    repeated = jnp.all(answer == answer[:, :, :1], axis=(1, 2))
    x, op, y, end = (answer[:, i, 0] for i in range(ANSWER_LEN))
    a, b = prompts[:, 1], prompts[:, 2]
    target = prompts[:, 4] * 10 + prompts[:, 5]
    numbers = ((x == a) & (y == b)) | ((x == b) & (y == a))
    is_op = (op == PLUS) | (op == MINUS) | (op == TIMES)
    formed = repeated & numbers & is_op & (end == EOS) & (x < DIGITS) & (y < DIGITS)
    value = jnp.where(op == PLUS, x + y, jnp.where(op == MINUS, x - y, x * y))
    exact = formed & (value == target)
    miss = 0.1 if partial else 0.0
    return jnp.where(exact, 1.0, jnp.where(formed, miss, 0.0)).astype(jnp.float32)


def _equations(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` equations ``BOS x op y = c₁ c₀ EOS`` (x, y in 0-9; no negative results)."""
    x = rng.integers(0, 10, n)
    y = rng.integers(0, 10, n)
    op = rng.choice([PLUS, MINUS, TIMES], n)
    swap = (op == MINUS) & (x < y)
    x, y = np.where(swap, y, x), np.where(swap, x, y)
    c = apply_op(x, op, y)
    cols = [np.full(n, BOS), x, op, y, np.full(n, EQUALS), c // 10, c % 10, np.full(n, EOS)]
    return np.stack(cols, 1).astype(np.int32)


def _formats(rng: np.random.Generator, n: int, stretch: int) -> np.ndarray:
    """``n`` prompts followed by an expression over their numbers, the target drawn
    independently of the expression (from another random problem)."""
    rows = problems()
    numbers = rows[rng.integers(0, len(rows), n), :2]
    target = rows[rng.integers(0, len(rows), n), 2]
    a, b = numbers[:, 0], numbers[:, 1]
    swap = rng.integers(0, 2, n).astype(bool)
    x, y = np.where(swap, b, a), np.where(swap, a, b)
    op = rng.choice([PLUS, MINUS, TIMES], n)
    # No negative results: a subtraction is written larger first.
    flip = (op == MINUS) & (x < y)
    x, y = np.where(flip, y, x), np.where(flip, x, y)
    prompt = [np.full(n, BOS), a, b, np.full(n, SEP), target // 10, target % 10, np.full(n, SEP)]
    answer = np.repeat(np.stack([x, op, y, np.full(n, EOS)], 1), stretch, axis=1)
    return np.concatenate([np.stack(prompt, 1), answer], 1).astype(np.int32)


def corpus(seed: int, n: int, stretch: int = 1) -> tuple[jax.Array, jax.Array]:
    """The pre-training corpus: ``(tokens, mask)``, both ``(n, 7 + 4 * stretch)``; half
    equations (padded with ``PAD``), half prompts with an answer over their numbers whose
    target was drawn independently. ``mask`` is 1 where a token is a prediction target (every
    token after ``BOS`` of an equation; only the answer of a format row).

    Example:
      >>> tokens, mask = corpus(0, 4)
      >>> tokens.shape, mask.shape
      ((4, 11), (4, 11))
      >>> decode(tokens[0])
      'BOS 8 + 5 = 1 3 EOS PAD PAD PAD'
    """
    rng = np.random.default_rng(seed)
    length = PROMPT_LEN + answer_len(stretch)
    half = n // 2
    eq = _equations(rng, half)
    eq = np.concatenate([eq, np.full((half, length - EQUATION_LEN), PAD, np.int32)], 1)
    eq_mask = np.zeros_like(eq, np.float32)
    eq_mask[:, 1:EQUATION_LEN] = 1.0
    fmt = _formats(rng, n - half, stretch)
    fmt_mask = np.zeros_like(fmt, np.float32)
    fmt_mask[:, PROMPT_LEN:] = 1.0
    return jnp.asarray(np.concatenate([eq, fmt])), jnp.asarray(np.concatenate([eq_mask, fmt_mask]))


def equations_of(rows) -> tuple[jax.Array, jax.Array]:
    """Equation prompts ``BOS x op y =`` ``(N, 5)`` and their two-digit answers ``(N, 2)``
    for rows ``(x, op token, y)``: for measuring whether a model evaluates expressions.

    Example:
      >>> p, c = equations_of([(7, TIMES, 8)])
      >>> decode(p), decode(c)
      ('BOS 7 * 8 =', '5 6')
    """
    rows = np.asarray(rows, np.int32).reshape(-1, 3)
    x, op, y = rows.T
    c = apply_op(x, op, y)
    prompts = np.stack([np.full(len(rows), BOS), x, op, y, np.full(len(rows), EQUALS)], 1)
    return jnp.asarray(prompts, jnp.int32), jnp.asarray(np.stack([c // 10, c % 10], 1), jnp.int32)


def all_equations() -> np.ndarray:
    """Every equation of the corpus as rows ``(x, op token, y)``: 100 sums, 100 products and
    the 55 subtractions with a non-negative result.

    Example:
      >>> all_equations().shape
      (255, 3)
    """
    rows = [
        (x, op, y)
        for op in (PLUS, MINUS, TIMES)
        for x in range(10)
        for y in range(10)
        if not (op == MINUS and x < y)
    ]
    return np.array(rows, np.int32)
