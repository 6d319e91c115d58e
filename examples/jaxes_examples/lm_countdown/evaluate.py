"""How well a model directory plays Countdown: greedy rewards and exact answers on held-out
problems, and pass@k (any of k answers sampled at a temperature exact).

Prompts are ``countdown_prompt``, left-padded (``Tokenizer.pad``), continued by
``jaxes.tasks.sequence.generate`` with the model's KV cache; each completion is cut at the
first end-of-text token and scored by ``countdown_reward``, as ``jaxes.llm.text_task`` scores
a member during the fine-tune.

Example:
  >>> summarise(np.array([[1.0, 0.1], [0.1, 0.0]]))
  {'reward': 0.3, 'format': 0.75, 'exact': 0.25, 'pass@2': 0.5}
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from jaxes.llm import countdown_prompt, countdown_reward
from jaxes.tasks.sequence import generate

# Tokens a model writes per prompt: the longest three-number completion, to its </answer>.
ANSWER_TOKENS = 32


@partial(jax.jit, static_argnums=(0, 4, 5))
def _generate(model, params, prompts, start, steps, temperature, key):
    def apply_fn(tokens, cache, position):
        return model.apply({"params": params}, tokens, cache, position)

    cache = model.init_cache(prompts.shape[0], start=start)
    return generate(apply_fn, cache, prompts, steps, key=key, temperature=temperature)


def completions(
    pretrained,
    params,
    problems: list[dict],
    *,
    samples: int = 1,
    temperature: float = 0.0,
    key=None,
    steps: int = ANSWER_TOKENS,
    rows: int = 512,
    prefix: str = "",
) -> list[list[str]]:
    """``samples`` completions of each problem (greedy when ``temperature`` is 0), as text
    up to the first end-of-answer token: ``out[i][j]`` is problem ``i``'s ``j``-th. Decoded
    ``rows`` sequences at a time. With ``prefix``, every completion is made to begin with it
    (e.g. ``problems.CAREFUL``: what the model writes in that style)."""
    tok = pretrained.tokenizer
    lead = tok.encode(prefix) if prefix else []
    ids, start = tok.pad([tok.encode(countdown_prompt(p)) + lead for p in problems])
    ids, start = np.repeat(ids, samples, 0), np.repeat(start, samples, 0)
    model = pretrained.model.clone(cache_len=ids.shape[1] + steps)
    key = jax.random.key(0) if key is None else key
    texts = []
    for at in range(0, ids.shape[0], rows):
        chunk = slice(at, at + rows)
        key, sub = jax.random.split(key)
        out = np.asarray(
            _generate(model, params, ids[chunk], start[chunk], steps, float(temperature), sub)
        )
        for row in out:
            ends = np.flatnonzero(np.isin(row, tok.eos_ids))
            texts.append(prefix + tok.decode(row[: ends[0]] if ends.size else row))
    return [texts[i * samples : (i + 1) * samples] for i in range(len(problems))]


def rewards(problems: list[dict], texts: list[list[str]]) -> np.ndarray:
    """``countdown_reward`` of each completion, ``(problems, samples)``."""
    return np.array(
        [[countdown_reward(p, t) for t in row] for p, row in zip(problems, texts, strict=True)]
    )


def summarise(scores: np.ndarray, problems: list[dict] | None = None) -> dict:
    """Mean reward, the share in the answer format (reward > 0), the share exact (reward 1)
    over every completion, and pass@k (``k`` = completions per problem: any exact); with
    ``problems``, the share exact of the three- and four-number ones apart too."""
    k = scores.shape[1]
    out = {
        "reward": round(float(scores.mean()), 4),
        "format": round(float((scores > 0).mean()), 4),
        "exact": round(float((scores == 1.0).mean()), 4),
        f"pass@{k}": round(float((scores == 1.0).any(axis=1).mean()), 4),
    }
    if problems is not None:
        sizes = np.array([len(p["numbers"]) for p in problems])
        for size in sorted(set(sizes.tolist())):
            exact = scores[sizes == size] == 1.0
            out[f"exact_{size}"] = round(float(exact.mean()), 4)
    return out


def measure(pretrained, params, problems, *, samples: int = 16, temperature: float = 1.0, seed=0):
    """``{"greedy": summarise(greedy), "sampled": summarise(samples at temperature)}`` on
    ``problems``, with a few greedy completions as ``"examples"``."""
    greedy = completions(pretrained, params, problems)
    sampled = completions(
        pretrained,
        params,
        problems,
        samples=samples,
        temperature=temperature,
        key=jax.random.key(seed),
    )
    return {
        "greedy": summarise(rewards(problems, greedy), problems),
        "sampled": summarise(rewards(problems, sampled), problems),
        "examples": [(p, g[0]) for p, g in zip(problems[:4], greedy[:4], strict=True)],
    }


def equal_params(a, b) -> bool:
    """Whether two parameter trees have the same structure and equal leaves, bit for bit."""
    if jax.tree.structure(a) != jax.tree.structure(b):
        return False
    return all(
        bool(jnp.array_equal(x, y))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )
