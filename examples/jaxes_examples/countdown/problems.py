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
* **Three numbers** (``numbers=3``, Countdown's shape: every number used once): ``a, b, c``
  (1-9) and a target 0-99 that ``x op y op z`` reaches, read left to right, for some order
  ``x, y, z`` of the numbers; 9,388 problems over 165 sets of numbers, enough for a held-out
  set of ``TEST_PROBLEMS`` = 2,000 over sets of numbers never trained or pre-trained on
  (``split(numbers=3, test_size=TEST_PROBLEMS)``).
* **Prompt**: ``BOS a b | t₁ t₀ |`` (7 tokens, the target as two digits; 8 with three
  numbers).
* **Answer**: ``x op y EOS`` with ``{x, y} = {a, b}`` (``x op y op z EOS`` with three),
  ``op`` one of ``+ - *``, and with ``stretch = k`` every answer token written ``k`` times
  (``4k`` tokens): the same problem with a longer answer, for measuring how ES's progress
  depends on the length generated.
* ``reward(prompts, tokens)``: 1 for a well-formed answer over exactly the given numbers whose
  value is the target, else 0 (``partial=True`` adds 0.1 for a well-formed answer over the
  given numbers that misses).
* **Pre-training corpus**: ``jaxes_examples.countdown.corpus`` (equations and the answer
  format, never which expression reaches a target).

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

import itertools

import jax
import jax.numpy as jnp
import numpy as np

DIGITS = 10
PLUS, MINUS, TIMES, EQUALS, SEP, BOS, EOS, PAD = range(DIGITS, DIGITS + 8)
VOCAB = DIGITS + 8
OPS = {"+": PLUS, "-": MINUS, "*": TIMES}
NAMES = [str(d) for d in range(DIGITS)] + ["+", "-", "*", "=", "|", "BOS", "EOS", "PAD"]
PROMPT_LEN = 7  # two numbers; prompt_len(n) in general
ANSWER_LEN = 4  # x op y EOS, before stretching
EQUATION_LEN = 8  # BOS x op y = c1 c0 EOS
NUMBERS = (2, 3)  # the games this module writes
TEST_PROBLEMS = 2000  # the three-number game's held-out set


def _check_numbers(numbers: int) -> int:
    if numbers not in NUMBERS:
        raise ValueError(f"numbers: expected 2 or 3 numbers per problem, got {numbers!r}")
    return int(numbers)


def prompt_len(numbers: int = 2) -> int:
    """Tokens in a prompt ``BOS n₁ .. n_k | t₁ t₀ |``.

    Example:
      >>> prompt_len(2), prompt_len(3)
      (7, 8)
    """
    return _check_numbers(numbers) + 5


def numbers_of(prompts) -> int:
    """How many numbers the prompts ``(N, L)`` give (their width less the other 5 tokens)."""
    return np.shape(prompts)[-1] - 5


def answer_len(stretch: int = 1, numbers: int = 2) -> int:
    """Tokens in an answer written with every token ``stretch`` times.

    Example:
      >>> answer_len(1), answer_len(4), answer_len(1, numbers=3)
      (4, 16, 6)
    """
    return 2 * _check_numbers(numbers) * int(stretch)


def equation_len(numbers: int = 2) -> int:
    """Tokens in an equation ``BOS x op y (op z) = c₁ c₀ EOS`` over ``numbers`` operands."""
    return 2 * _check_numbers(numbers) + 4


def apply_op(x, op: int, y):
    """``x op y`` for an op token (``PLUS``, ``MINUS``, ``TIMES``); numpy or jax arrays.

    Example:
      >>> int(apply_op(7, MINUS, 3)), int(apply_op(7, TIMES, 3))
      (4, 21)
    """
    return np.where(op == PLUS, x + y, np.where(op == MINUS, x - y, x * y))


def evaluate(terms, ops):
    """``x₀ op₀ x₁ op₁ x₂ ...`` read left to right, for ``k`` terms and ``k - 1`` ops (numpy).

    Example:
      >>> int(evaluate([2, 3, 4], [PLUS, TIMES]))  # (2 + 3) * 4
      20
    """
    value = terms[0]
    for op, term in zip(ops, terms[1:], strict=True):
        value = apply_op(value, op, term)
    return value


def decode(tokens) -> str:
    """The tokens as text, space-separated.

    Example:
      >>> decode([15, 1, 2, 14])
      'BOS 1 2 |'
    """
    return " ".join(NAMES[int(t)] for t in np.asarray(tokens).reshape(-1))


def encode_prompt(*values: int) -> np.ndarray:
    """``BOS n₁ .. n_k | t₁ t₀ |`` for ``encode_prompt(n₁, .., n_k, target)`` as int32 tokens
    (2 or 3 numbers 0-9, the target as two digits, 0-99).

    Example:
      >>> encode_prompt(2, 9, 7).tolist()
      [15, 2, 9, 14, 0, 7, 14]
      >>> encode_prompt(2, 9, 4, 22).tolist()
      [15, 2, 9, 4, 14, 2, 2, 14]
    """
    *numbers, target = values
    if (
        len(numbers) not in NUMBERS
        or not 0 <= target <= 99
        or not all(0 <= a <= 9 for a in numbers)
    ):
        given = ", ".join(map(str, values))
        raise ValueError(f"encode_prompt: 2 or 3 numbers 0-9 and a target 0-99, got {given}")
    return np.array([BOS, *numbers, SEP, target // 10, target % 10, SEP], np.int32)


def encode_answer(*terms, stretch: int = 1) -> np.ndarray:
    """``x op y (op z) EOS`` as int32 tokens, each written ``stretch`` times.

    Example:
      >>> encode_answer(5, "-", 2, stretch=2).tolist()
      [5, 5, 11, 11, 2, 2, 16, 16]
      >>> encode_answer(5, "-", 2, "*", 3).tolist()
      [5, 11, 2, 12, 3, 16]
    """
    tokens = [OPS[t] if isinstance(t, str) else int(t) for t in terms]
    return np.repeat(np.array([*tokens, EOS], np.int32), int(stretch))


def _reachable(numbers: tuple[int, ...]) -> list[int]:
    """The targets 0-99 some order of ``numbers`` and some ops reach, read left to right."""
    values = {
        int(evaluate(order, ops))
        for order in itertools.permutations(numbers)
        for ops in itertools.product(OPS.values(), repeat=len(numbers) - 1)
    }
    return sorted(v for v in values if 0 <= v <= 99)


def problems(numbers: int = 2) -> np.ndarray:
    """Every problem, int32 rows ``(n₁, .., n_k, target)``: numbers in 1-9 and each distinct
    target 0-99 that some order of them reaches with ``+ - *`` read left to right (with two:
    ``a + b``, ``a * b``, ``a - b``, ``b - a``).

    Example:
      >>> p = problems()
      >>> p.shape, p[:3].tolist()
      ((242, 3), [[1, 1, 0], [1, 1, 1], [1, 1, 2]])
      >>> problems(3).shape
      (9388, 4)
    """
    rows = [
        (*given, t)
        for given in itertools.product(range(1, 10), repeat=_check_numbers(numbers))
        for t in _reachable(given)
    ]
    return np.array(rows, np.int32)


def number_sets(rows) -> set[tuple[int, ...]]:
    """The sets of numbers (sorted, with repeats) of problem rows ``(n₁, .., n_k, target)``.

    Example:
      >>> sorted(number_sets([[3, 1, 4], [1, 3, 2], [2, 2, 4]]))
      [(1, 3), (2, 2)]
    """
    rows = np.asarray(rows)
    return {tuple(r) for r in np.sort(rows[:, :-1], axis=1).tolist()}


def split(
    seed: int = 0, held_out: float = 0.25, numbers: int = 2, test_size: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``problems(numbers)`` cut into ``(train, held_out)`` problem rows by their set of
    numbers: a ``held_out`` fraction of the sets (two numbers: the 45 unordered pairs
    ``{a, b}``), drawn with ``seed``, and every problem over them (in any order, any target)
    are held out, so a held-out problem's numbers never appear together in training
    (remembering which op a training set wanted cannot pass for solving it).

    With ``test_size``, sets are held out in the same drawn order until they hold at least
    ``test_size`` problems, and ``test_size`` of those, drawn with ``seed``, are returned; the
    rest of them are in neither part (``held_out`` is then not used).

    Example:
      >>> train, test = split(0)
      >>> train.shape, test.shape
      ((176, 3), (66, 3))
      >>> pairs = lambda rows: {(min(a, b), max(a, b)) for a, b, _ in rows.tolist()}
      >>> len(pairs(test)), pairs(train) & pairs(test)
      (11, set())
      >>> train, test = split(0, numbers=3, test_size=TEST_PROBLEMS)
      >>> len(test), number_sets(train) & number_sets(test)
      (2000, set())
    """
    rows = problems(numbers)
    sets = np.sort(rows[:, :-1], axis=1)
    unique, which = np.unique(sets, axis=0, return_inverse=True)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(unique))
    if test_size is None:
        count = int(round(held_out * len(unique)))
    else:
        if not 0 < test_size <= len(rows):
            raise ValueError(f"test_size: expected 1..{len(rows)} problems, got {test_size!r}")
        per_set = np.bincount(which.reshape(-1), minlength=len(unique))[order]
        count = int(np.searchsorted(np.cumsum(per_set), test_size) + 1)
    held = np.zeros(len(unique), bool)
    held[order[:count]] = True
    test = held[which.reshape(-1)]
    train, rest = rows[~test], rows[test]
    if test_size is not None:
        rest = rest[np.sort(rng.choice(len(rest), test_size, replace=False))]
    return train, rest


def prompts_of(rows) -> jax.Array:
    """The prompts ``(N, prompt_len)`` of problem rows ``(n₁, .., n_k, target)``.

    Example:
      >>> prompts_of(problems()[:2]).shape
      (2, 7)
    """
    return jnp.asarray(np.stack([encode_prompt(*map(int, r)) for r in np.asarray(rows)]))


def solutions(*values: int) -> list[str]:
    """The answers that score 1 for ``solutions(n₁, .., n_k, target)``, as text.

    Example:
      >>> solutions(2, 2, 4)
      ['2 + 2', '2 * 2']
      >>> solutions(1, 2, 3, 9)
      ['1 + 2 * 3', '2 + 1 * 3']
    """
    *numbers, target = values
    names = {op: name for name, op in OPS.items()}
    out = []
    for order in dict.fromkeys(itertools.permutations(numbers)):
        for ops in itertools.product(OPS.values(), repeat=len(numbers) - 1):
            if int(evaluate(order, ops)) == target:
                text = [str(order[0])]
                for op, term in zip(ops, order[1:], strict=True):
                    text += [names[op], str(term)]
                out.append(" ".join(text))
    return out


def shape_accuracy(rows, order, ops) -> float:
    """The accuracy on problem rows ``(n₁, .., n_k, target)`` of writing the prompt's numbers
    in ``order`` (indices into them) with ``ops`` (op tokens), whatever the target.

    Example:
      >>> shape_accuracy(np.array([[2, 3, 5], [4, 1, 5], [2, 3, 7]]), (0, 1), (PLUS,))
      0.6666666666666666
    """
    rows = np.asarray(rows)
    return float(np.mean(evaluate([rows[:, i] for i in order], ops) == rows[:, -1]))


def shape_text(order, ops) -> str:
    """An answer shape as text, the numbers named by their place in the prompt.

    Example:
      >>> shape_text((2, 0, 1), (TIMES, PLUS))
      'n3 * n1 + n2'
    """
    names = {op: name for name, op in OPS.items()}
    rest = "".join(f" {names[op]} n{i + 1}" for op, i in zip(ops, order[1:], strict=True))
    return f"n{order[0] + 1}{rest}"


def fixed_answer_accuracy(rows) -> tuple[float, tuple[tuple[int, ...], tuple[int, ...]]]:
    """The best ``shape_accuracy`` on problem rows of one answer shape ``(order, ops)``
    written whatever the target, and that shape: the floor a fine-tuned model must beat before
    it can be said to read the target at all.

    Example:
      >>> rows = np.array([[2, 3, 5], [4, 1, 5], [2, 3, 6], [1, 1, 0]])
      >>> accuracy, shape = fixed_answer_accuracy(rows)
      >>> accuracy, shape_text(*shape)
      (0.5, 'n1 + n2')
    """
    k = np.asarray(rows).shape[1] - 1
    shapes = [
        (order, ops)
        for order in itertools.permutations(range(k))
        for ops in itertools.product(OPS.values(), repeat=k - 1)
    ]
    scored = [(shape_accuracy(rows, *shape), shape) for shape in shapes]
    return max(scored, key=lambda item: item[0])


def reward(prompts, tokens, stretch: int = 1, partial: bool = False) -> jax.Array:
    """``(N,)`` float32: 1 where ``tokens`` is an exact answer to ``prompts``, else 0.

    Exact: the first ``answer_len`` tokens are ``x op y EOS`` (``x op y op z EOS`` for
    three-number prompts) with every token written ``stretch`` times, the numbers digits
    that are the prompt's numbers in some order, each ``op`` one of ``+ - *`` and the
    expression, read left to right, the target. Tokens after the answer are ignored. With
    ``partial``, a well-formed answer over the prompt's numbers that misses the target
    scores 0.1 (a shaping variant; accuracy is always the exact reward).

    Args:
      prompts: ``(N, 7)`` (two numbers) or ``(N, 8)`` (three) int tokens (``encode_prompt``).
      tokens: ``(N, T)`` int tokens generated after them, ``T >= answer_len(stretch, k)``.
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
    if prompts.ndim != 2 or numbers_of(prompts) not in NUMBERS:
        raise ValueError(
            f"prompts: expected (N, {PROMPT_LEN}) tokens (two numbers) or (N, {PROMPT_LEN + 1}) "
            f"(three), got shape {prompts.shape}"
        )
    k = numbers_of(prompts)
    length = answer_len(stretch, k)
    if tokens.ndim != 2 or tokens.shape[0] != prompts.shape[0] or tokens.shape[1] < length:
        raise ValueError(
            f"tokens: expected ({prompts.shape[0]}, T >= {length}) tokens for "
            f"{prompts.shape[0]} prompts and stretch {stretch}, got shape {tokens.shape}"
        )
    answer = tokens[:, :length].reshape(tokens.shape[0], 2 * k, stretch)
    repeated = jnp.all(answer == answer[:, :, :1], axis=(1, 2))
    terms, ops, end = answer[:, 0 : 2 * k : 2, 0], answer[:, 1 : 2 * k - 1 : 2, 0], answer[:, -1, 0]
    given = prompts[:, 1 : 1 + k]
    target = prompts[:, k + 2] * 10 + prompts[:, k + 3]
    numbers = jnp.all(jnp.sort(terms, axis=1) == jnp.sort(given, axis=1), axis=1)
    is_op = jnp.all((ops == PLUS) | (ops == MINUS) | (ops == TIMES), axis=1)
    digits = jnp.all(terms < DIGITS, axis=1)
    formed = repeated & numbers & is_op & (end == EOS) & digits
    value = terms[:, 0]
    for i in range(k - 1):
        x, op = terms[:, i + 1], ops[:, i]
        value = jnp.where(op == PLUS, value + x, jnp.where(op == MINUS, value - x, value * x))
    exact = formed & (value == target)
    miss = 0.1 if partial else 0.0
    return jnp.where(exact, 1.0, jnp.where(formed, miss, 0.0)).astype(jnp.float32)
