"""The fine-tune: ES on the Countdown reward through the library's path, from a model
directory to a run directory, and the held-out reward before and after.

``finetune`` is what ``jaxes finetune --model DIR --task countdown`` does, written out:
``jaxes.llm.load`` the directory, ``jaxes.llm.text_task`` with ``countdown_prompt`` and
``countdown_reward`` (members decode a batch of training problems; the centre is scored
greedily on the held-out problems after every block), OpenAI-ES with rank-1 low-rank noise
(``jaxes.open_es``, ``jaxes.noise.lowrank(rank=1)``) and ``jaxes.training.run``.

Example (about two minutes on a 2-core CPU, so skipped by the doctests):
  >>> from jaxes_examples.lm_countdown import pretrained
  >>> summary = finetune(pretrained(), "runs/lm-countdown")  # doctest: +SKIP
  >>> summary["before"], summary["after"]  # doctest: +SKIP
  (0.27, 0.39)
"""

from __future__ import annotations

import dataclasses
import time

import jax
import optax

import jaxes
from jaxes.llm import countdown_prompt, countdown_reward, load, text_task
from jaxes.training import checkpoint, init_state, run, rundir

from . import problems as countdown
from .evaluate import ANSWER_TOKENS


@dataclasses.dataclass(frozen=True)
class FinetuneSetup:
    """The ES run: ``population`` members of rank-1 noise of scale ``sigma``, steps of
    ``learning_rate`` (``strategy``), ``generations`` generations of ``batch`` training
    problems each, decoded at ``temperature`` (0: greedy); ``eval_every`` generations a block
    (the held-out reward is measured after each); ``problems`` training problems to draw
    batches from and ``held_out`` problems to score on, of ``numbers`` numbers.

    The defaults are those measured to raise the quick model's held-out reward in 20
    generations: σ = 0.01 (its matrices' entries are about 0.09; a member of σ = 0.02 is
    already much worse than the centre) and Adam steps of 0.001 (0.003 overshoots and the
    reward falls back)."""

    population: int = 32
    sigma: float = 0.01
    learning_rate: float = 0.001
    generations: int = 20
    batch: int = 16
    temperature: float = 0.0
    eval_every: int = 5
    problems: int = 2000
    held_out: int = 256
    numbers: tuple[int, ...] = (3, 4)
    optimizer: str = "adam"
    fitness_shaping: str = "centered_rank"
    seed: int = 0

    def strategy(self):
        """OpenAI-ES of these settings: Adam steps of ``learning_rate`` (``optimizer="adam"``)
        or ``jaxes finetune``'s plain steps ``θ += learning_rate (1/P) Σ zᵢ εᵢ`` (``"sgd"``:
        SGD at ``learning_rate * sigma`` on open_es's estimate)."""
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"optimizer: expected 'adam' or 'sgd', got {self.optimizer!r}")
        step = self.learning_rate * (self.sigma if self.optimizer == "sgd" else 1.0)
        return jaxes.open_es(
            self.population,
            self.sigma,
            optax.adam(step) if self.optimizer == "adam" else optax.sgd(step),
            fitness_shaping=self.fitness_shaping,
            noise=jaxes.noise.lowrank(rank=1),
        )


def problem_sets(setup: FinetuneSetup) -> tuple[list[dict], list[dict]]:
    """``(training, held-out)``: the held-out problems the pre-training never saw
    (``problems.held_out``) and training problems of the fine-tune's own seed, disjoint from
    them."""
    held = countdown.held_out(setup.held_out, setup.numbers)
    train = countdown.train(setup.problems, countdown.FINETUNE_SEED, setup.numbers, exclude=held)
    countdown.check_disjoint(train, held)
    return train, held


def finetune(directory: str, out: str, setup: FinetuneSetup = FinetuneSetup(), **run_kwargs):
    """ES on ``directory``'s model, written to the run directory ``out``. Returns
    ``jaxes.training.run``'s summary with ``before`` (the held-out greedy reward of the
    pre-trained model), ``after`` (of the final centre), ``params`` (the whole tree of the
    final centre) and ``seconds`` (the whole call)."""
    started = time.perf_counter()
    pre = load(directory)
    train, held = problem_sets(setup)
    lm = text_task(
        pre,
        train,
        countdown_prompt,
        countdown_reward,
        answer_tokens=ANSWER_TOKENS,
        eval_problems=held,
        batch_size=setup.batch,
        temperature=setup.temperature,
    )
    evaluate = jax.jit(lm.task.evaluate_policy)
    before = float(evaluate(jax.random.key(0), lm.task.init_params(None), None).mean())
    es = setup.strategy()
    summary = run(
        es,
        lm.task,
        out,
        generations=setup.generations,
        eval_every=setup.eval_every,
        seed=setup.seed,
        config={"finetune": dataclasses.asdict(setup), "model": str(directory)},
        **run_kwargs,
    )
    centre = jaxes.centre(final_state(out, es, lm.task, setup.seed).strategy_state)
    after = float(evaluate(jax.random.key(0), centre, None).mean())
    return {
        **summary,
        "before": before,
        "after": after,
        "params": lm.merge(centre),
        "seconds": time.perf_counter() - started,
    }


def final_state(out: str, strategy, task, seed: int):
    """The newest checkpoint of the run in ``out`` (a ``jaxes.step.TrainState``)."""
    like = init_state(strategy, task, seed)
    return checkpoint.restore_run_state(rundir.checkpoints_of(out), like)[1]
