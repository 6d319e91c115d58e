"""A checkpoint fine-tuned on problems written as text: ``text_task`` turns a ``Pretrained``
model, a list of problems, how each becomes a prompt and a reward into a ``jaxes.types.Task``
(``jaxes.tasks.sequence.sequence_task`` underneath: members factored, prompts left-padded).

A reward of text (``reward(problem, completion) -> float``) runs on the host through
``TextReward``: the generated ids are cut at the first end-of-answer token and decoded, and
the prompt's ids find the problem it was made from. If the reward raises, the program stops
with that error and ``TextReward.failure`` keeps one line naming the prompt; the run's last
checkpoint is untouched.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxes import trees
from jaxes.checks import check_int
from jaxes.factored import int8
from jaxes.llm.pretrained import Pretrained
from jaxes.llm.tokenizer import Tokenizer
from jaxes.tasks.layers import embedding_bits, embedding_values
from jaxes.tasks.sequence import sequence_task
from jaxes.types import Task


class RewardError(ValueError):
    """A user's reward raised: the message names the prompt."""


class TextReward:
    """``reward(problem, completion)`` as a JAX ``reward_fn(prompts, generated)`` over the
    ids: a host callback (``jax.pure_callback``), batched over members by broadcasting.

    Attributes:
      failure: the first failure's one line (``None`` until the reward raises).
    """

    def __init__(
        self,
        reward: Callable[[dict, str], float],
        tokenizer: Tokenizer,
        problems: Sequence[dict],
        prompt_ids: np.ndarray,
    ):
        self.reward, self.tokenizer, self.problems = reward, tokenizer, list(problems)
        self.index = {self._key(row): i for i, row in enumerate(np.asarray(prompt_ids))}
        self.failure: str | None = None

    def _key(self, row: np.ndarray) -> tuple[int, ...]:
        real = np.flatnonzero(row != self.tokenizer.pad_id)
        return tuple(int(t) for t in row[real[0] :]) if real.size else ()

    def completion(self, ids: np.ndarray) -> str:
        """The text of generated ``ids`` up to the first end-of-answer token."""
        ends = np.flatnonzero(np.isin(ids, self.tokenizer.eos_ids))
        return self.tokenizer.decode(ids[: ends[0]] if ends.size else ids)

    def _score(self, prompt: np.ndarray, generated: np.ndarray) -> float:
        problem = self.problems[self.index[self._key(prompt)]]
        completion = self.completion(generated)
        try:
            return float(self.reward(problem, completion))
        except Exception as err:
            # The problem names the prompt (prompts made from a template share their start).
            text = self.tokenizer.decode(prompt)
            shown = text if len(text) <= 40 else text[:37] + "..."
            record = repr(problem)
            record = record if len(record) <= 80 else record[:77] + "..."
            self.failure = self.failure or (
                f"reward: {type(err).__name__}: {err} on the prompt {shown!r} of problem "
                f"{record} (completion {completion[:40]!r})"
            )
            raise RewardError(self.failure) from err

    def _host(self, prompts: np.ndarray, generated: np.ndarray) -> np.ndarray:
        # JAX hands a callback jax.Arrays: read as numpy, no row costs a JAX op.
        prompts, generated = np.asarray(prompts), np.asarray(generated)
        lead = generated.shape[:-1]
        prompts = np.broadcast_to(prompts, lead + prompts.shape[-1:]).reshape(-1, prompts.shape[-1])
        rows = generated.reshape(-1, generated.shape[-1])
        scores = [self._score(p, g) for p, g in zip(prompts, rows, strict=True)]
        return np.asarray(scores, np.float32).reshape(lead)

    def __call__(self, prompts: jax.Array, generated: jax.Array) -> jax.Array:
        out = jax.ShapeDtypeStruct(generated.shape[:-1], jnp.float32)
        return jax.pure_callback(self._host, out, prompts, generated, vmap_method="broadcast_all")


class TextTask(NamedTuple):
    """What ``text_task`` builds.

    Attributes:
      task: the ``jaxes.types.Task`` to train (``jaxes.training.run(strategy, task, out)``).
      reward: the reward as the task calls it (a ``TextReward`` for a text reward: its
        ``failure`` names the prompt a failing reward was scoring).
      prompts: the problems' left-padded prompt ids ``(N, Tp)``.
      frozen: the params the search leaves as the checkpoint has them (``None``: none); a
        bfloat16 embedding table as the integers of its bits
        (``jaxes.tasks.layers.embedding_bits``: the jitted step then holds no view of it).
    """

    task: Task
    reward: Any
    prompts: np.ndarray
    frozen: dict | None

    def merge(self, centre) -> dict:
        """The whole parameter tree of a searched ``centre`` (what ``export`` writes)."""
        return embedding_values(trees.merged(centre, self.frozen))


FROZEN_BY_DEFAULT = ("embed_tokens", "lm_head")


def split_params(params: dict, embeddings: bool) -> tuple[dict, dict | None]:
    """``(searched, frozen)``: with ``embeddings``, everything is searched."""
    if embeddings:
        return params, None
    frozen = {k: v for k, v in params.items() if k in FROZEN_BY_DEFAULT}
    return {k: v for k, v in params.items() if k not in FROZEN_BY_DEFAULT}, frozen


def _quantized(task: Task) -> Task:
    """``task`` whose factored members read an int8 centre."""
    inner = task.evaluate_factored

    def evaluate_factored(key, centre, deltas, task_state):
        return inner(key, int8.quantize(centre), deltas, task_state)

    return dataclasses.replace(task, evaluate_factored=evaluate_factored)


def encode_prompts(
    tokenizer: Tokenizer, texts: Sequence[str], chat: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Left-padded ids of ``texts`` and each one's first real slot; with ``chat``, each text is
    the user's message in the model's chat template (encoded without a second BOS, as
    transformers' ``apply_chat_template`` does)."""
    rows = []
    for text in texts:
        if chat:
            text = tokenizer.apply_chat_template([{"role": "user", "content": text}], True)
        rows.append(tokenizer.encode(text, add_special_tokens=not chat))
    return tokenizer.pad(rows)


def text_task(
    pretrained: Pretrained,
    problems: Sequence[dict],
    prompt: Callable[[dict], str],
    reward,
    *,
    answer_tokens: int,
    eval_problems: Sequence[dict] | None = None,
    chat: bool = False,
    batch_size: int | None = None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    chunk_size: int | None = None,
    embeddings: bool = False,
    quantize: bool = False,
) -> TextTask:
    """A ``TextTask`` whose task's fitness is a member's mean reward on a batch of ``problems``.

    Args:
      pretrained: the model (``jaxes.llm.load``); its params are the search's start.
      problems: records (dicts) the prompts are made from and the reward reads.
      prompt: ``prompt(problem) -> str``, the text the model continues.
      reward: ``reward(problem, completion: str) -> float`` (on the host), or a JAX
        ``reward(prompts, generated) -> (n,)`` over ids, marked by ``reward.over_tokens =
        True``; maximised.
      answer_tokens: tokens each member writes per prompt.
      eval_problems: the held-out problems the centre is scored on, greedily, after each
        block (``None``: ``problems``).
      chat: wrap each prompt as a user message in the model's chat template.
      batch_size, temperature, top_p, chunk_size: as ``jaxes.tasks.sequence.sequence_task``.
      embeddings: search the token embeddings and an untied output head too; by default
        they stay the checkpoint's (``frozen``), and the search covers every projection
        (q, k, v, o, gate, up, down), their biases and the norms.
      quantize: members read an int8 copy of the centre's matrices (per-channel scales,
        ``jaxes.factored.int8``), made once a generation, with their low-rank terms exact.

    The search starts from ``TextTask.searched``: the params ``task.init_params`` returns;
    ``TextTask.frozen`` holds the rest (``merge`` puts a centre back into the whole tree).
    """
    answer_tokens = check_int("answer_tokens", answer_tokens, 1)
    if not problems:
        raise ValueError("problems: expected at least one problem")
    eval_problems = problems if eval_problems is None else eval_problems
    tokenizer = pretrained.tokenizer
    ids, starts = encode_prompts(tokenizer, [prompt(p) for p in problems], chat)
    eval_ids, eval_starts = encode_prompts(tokenizer, [prompt(p) for p in eval_problems], chat)
    longest = max(ids.shape[1], eval_ids.shape[1])
    model = pretrained.model.clone(cache_len=longest + answer_tokens)
    if getattr(reward, "over_tokens", False):
        reward_fn = reward
    else:
        reward_fn = TextReward(
            reward,
            tokenizer,
            [*problems, *eval_problems],
            np.concatenate([_left(ids, longest, tokenizer), _left(eval_ids, longest, tokenizer)]),
        )
    searched, frozen = split_params(pretrained.params, embeddings)
    frozen = None if frozen is None else embedding_bits(frozen)
    task = sequence_task(
        model,
        lambda key: searched,
        ids,
        reward_fn,
        answer_tokens,
        temperature=temperature,
        top_p=top_p,
        batch_size=batch_size,
        eval_prompts=eval_ids,
        chunk_size=chunk_size,
        starts=starts,
        eval_starts=eval_starts,
        frozen=frozen,
    )
    if quantize:
        task = _quantized(task)
    return TextTask(task, reward_fn, ids, frozen)


def _left(ids: np.ndarray, length: int, tokenizer: Tokenizer) -> np.ndarray:
    """``ids`` left-padded to ``length`` columns (the text reward's keys ignore padding)."""
    pad = np.full((ids.shape[0], length - ids.shape[1]), tokenizer.pad_id, ids.dtype)
    return np.concatenate([pad, ids], axis=1)
