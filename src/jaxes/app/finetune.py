"""Fine-tuning runs of a Hugging Face checkpoint, from their settings.

``settings`` checks and completes what ``jaxes finetune`` was given; ``build`` makes the model,
the ``TextTask`` (``jaxes.llm.text_task``) and the strategy (``open_es`` with low-rank members
and plain steps) that a run's settings describe; ``read_run`` reads a run's settings back from
its ``config.json``, ``load_run`` its state at a checkpoint, and ``export_run`` writes its centre
as a model directory. A run's ``config.json`` holds every setting (the model directory as an
absolute path), so that ``--resume`` and ``jaxes export`` rebuild the same task.
"""

from __future__ import annotations

import importlib.util
import os
import sys

from jaxes.app.checks import ConfigError, check_number
from jaxes.checks import check_int
from jaxes.training import checkpoint, rundir

COMMAND = "finetune"
# Countdown's training problems are drawn with one seed and the held-out ones with another,
# leaving out any that is also a training problem.
TRAIN_SEED, EVAL_SEED = 0, 1
EVAL_PROBLEMS = 64  # held out by default (a jsonl file: its last fifth, at most this many)
TASKS = 'countdown, or jsonl:PATH (a file of {"question", "answer"} lines)'
# The method every run uses, recorded beside the settings: OpenAI-ES with antithetic low-rank
# members, z-scored rewards and plain steps θ += α (1/P) Σ zᵢ εᵢ (Qiu et al. 2025, EGGROLL).
METHOD = {
    "command": COMMAND,
    "strategy": "open_es",
    "noise": "lowrank",
    "fitness_shaping": "z_score",
    "optimizer": "sgd",
    "antithetic": True,
}
# Settings the runner records itself (``jaxes.training.run``'s loop).
LOOP = ("population_size", "generations", "seed", "eval_every", "checkpoint_every", "devices")
# The rest, and their defaults (``None``: resolved from the others).
DEFAULTS = {
    "model": None,
    "task": "countdown",
    "reward": None,
    "population_size": 32,
    "rank": 1,
    "sigma": 1e-3,
    "learning_rate": 5e-4,
    "generations": 100,
    "answer_tokens": 64,
    "batch_size": 4,
    "chunk_size": None,
    "problems": 1000,
    "eval_problems": None,
    "eval_every": 10,
    "checkpoint_every": None,
    "temperature": 0.0,
    "top_p": 1.0,
    "dtype": None,
    "int8": False,
    "stream_weights": False,
    "embeddings": False,
    "chat": False,
    "seed": 0,
    "devices": 0,
}

# Settings added after the first release of `jaxes finetune`: a run written before them reads
# as their default, so it still resumes and exports.
ADDED = ("stream_weights", "chunk_size")


def _task_path(task) -> str | None:
    """The file of a ``jsonl:PATH`` task (``None`` for countdown); ``ConfigError`` otherwise."""
    if task == "countdown":
        return None
    if isinstance(task, str) and task.startswith("jsonl:") and task[len("jsonl:") :].strip():
        return task[len("jsonl:") :]
    raise ConfigError(f"--task: expected {TASKS}, got {task!r}")


def _reward_spec(spec: str) -> tuple[str, str]:
    path, _, name = spec.rpartition(":") if isinstance(spec, str) else ("", "", "")
    if not path or not name.isidentifier():
        raise ConfigError(f"--reward: expected FILE.py:NAME (a function in a file), got {spec!r}")
    return path, name


def settings(given: dict, defaults: dict) -> dict:
    """Every setting of a new run: ``given`` (flags, ``None`` left out) over ``defaults``,
    checked, with paths made absolute and the held-out count resolved."""
    s = {**defaults, **given}
    if s["model"] is None:
        raise ConfigError("--model: give a Hugging Face model directory (config.json, weights)")
    s["model"] = os.path.abspath(s["model"])
    path = _task_path(s["task"])
    if path is not None:
        s["task"] = "jsonl:" + os.path.abspath(path)
        if "problems" in given:
            raise ConfigError("--problems: countdown only (a jsonl: file's problems are its lines)")
        s["problems"] = None
    if s["reward"] is not None:
        file, name = _reward_spec(s["reward"])
        s["reward"] = f"{os.path.abspath(file)}:{name}"
    for name in ("rank", "generations", "answer_tokens", "batch_size", "eval_every"):
        check_int(name, s[name], 1)
    for name in ("problems", "eval_problems", "checkpoint_every"):
        if s[name] is not None:
            check_int(name, s[name], 1)
    check_int("devices", s["devices"], 0)
    if s["chunk_size"] is not None:
        check_int("chunk_size", s["chunk_size"], 1)
        if s["population_size"] % s["chunk_size"]:
            raise ConfigError(
                f"chunk_size: {s['chunk_size']} does not divide the population of "
                f"{s['population_size']}"
            )
    check_number("learning_rate", s["learning_rate"], 0, inclusive=False)
    if s["checkpoint_every"] is None:
        s["checkpoint_every"] = s["eval_every"]
    if s["eval_problems"] is None:
        s["eval_problems"] = (
            EVAL_PROBLEMS if path is None else max(1, min(EVAL_PROBLEMS, len(_read(path)) // 5))
        )
    return s


def run_config(s: dict) -> dict:
    """What ``config.json`` records besides the runner's loop settings."""
    return {**METHOD, **{k: v for k, v in s.items() if k not in LOOP}}


def loop_settings(s: dict) -> dict:
    """The runner's keywords from the settings (``devices`` as the run records it)."""
    keys = ("generations", "seed", "eval_every", "checkpoint_every", "devices")
    return {k: s[k] for k in keys}


def read_run(run: str, argument: str) -> tuple[dict, str]:
    """The settings of the finetune run in ``run`` and its ``config.json``; ``ConfigError``
    naming ``argument`` when ``run`` is not one."""
    path = rundir.config_of(run, argument)
    saved = rundir.read_json(path)
    if not isinstance(saved, dict) or saved.get("command") != COMMAND:
        raise ConfigError(
            f"{argument}: {run} is not a `jaxes finetune` run (its config.json names no model)"
        )
    missing = sorted(set(DEFAULTS) - set(saved) - set(ADDED))
    if missing:
        raise ConfigError(f"{path}: missing settings {missing}")
    return {k: saved.get(k, DEFAULTS[k]) for k in DEFAULTS}, path


def _read(path: str) -> list[dict]:
    from jaxes.llm import read_jsonl

    try:
        return read_jsonl(path)
    except OSError as err:
        raise ConfigError(f"--task: cannot read {path} ({err.strerror})") from None


def countdown_split(n: int, m: int) -> tuple[list[dict], list[dict]]:
    """``n`` training and ``m`` held-out Countdown problems, the held-out ones none of the
    training ones.

    Example:
      >>> train, held = countdown_split(50, 10)
      >>> len(train), len(held), any(p in train for p in held)
      (50, 10, False)
    """
    from jaxes.llm import countdown_problems

    train = countdown_problems(n, seed=TRAIN_SEED)
    seen = {(tuple(p["numbers"]), p["target"]) for p in train}
    held, drawn = [], m
    while len(held) < m:
        fresh = countdown_problems(drawn, seed=EVAL_SEED)  # the same stream, drawn further
        held = [p for p in fresh if (tuple(p["numbers"]), p["target"]) not in seen][:m]
        drawn *= 2
    return train, held


def user_reward(spec: str):
    """The function ``NAME`` of the Python file ``FILE`` (``spec`` is ``FILE.py:NAME``)."""
    path, name = _reward_spec(spec)
    module_name = f"jaxes_user_reward_{abs(hash(path))}"
    loader = importlib.util.spec_from_file_location(module_name, path)
    if not os.path.isfile(path) or loader is None:
        raise ConfigError(f"--reward: {path} is not a Python file")
    module = importlib.util.module_from_spec(loader)
    sys.modules[module_name] = module  # as an import would (dataclasses look it up)
    try:
        loader.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - the user's file: one line, whatever it raised
        raise ConfigError(
            f"--reward: importing {path} raised {type(err).__name__}: {err}"
        ) from None
    reward = getattr(module, name, None)
    if not callable(reward):
        raise ConfigError(f"--reward: {path} has no function {name}")
    return reward


def problems(s: dict):
    """``(train, held_out, prompt, reward)`` of a run's task."""
    from jaxes.llm import countdown_prompt, countdown_reward, numeric_reward

    path = _task_path(s["task"])
    if path is None:
        train, held = countdown_split(s["problems"], s["eval_problems"])
        prompt, reward = countdown_prompt, countdown_reward
    else:
        every = _read(path)
        if s["eval_problems"] >= len(every):
            raise ConfigError(
                f"--eval-problems: {path} has {len(every)} problems; hold out fewer, so that "
                "some are left to train on"
            )
        train, held = every[: -s["eval_problems"]], every[-s["eval_problems"] :]
        prompt, reward = (lambda problem: str(problem["question"])), numeric_reward
    if s["reward"] is not None:
        reward = user_reward(s["reward"])
    return train, held, prompt, reward


def build(s: dict, model: str | None = None):
    """``(pretrained, text_task, strategy)`` of the settings ``s``; ``model``: the directory
    as the user wrote it, for the error line of a bad one (default ``s["model"]``)."""
    import optax

    from jaxes.llm import load, text_task
    from jaxes.noise import lowrank
    from jaxes.strategies import open_es

    # open_es's estimate is (1/(Pσ)) Σ zᵢ εᵢ, so the papers' step α (1/P) Σ zᵢ εᵢ is SGD at ασ.
    strategy = open_es(
        s["population_size"],
        sigma=s["sigma"],
        optimizer=optax.sgd(s["learning_rate"] * s["sigma"]),
        fitness_shaping=METHOD["fitness_shaping"],
        noise=lowrank(rank=s["rank"]),
    )
    train, held, prompt, reward = problems(s)  # bad settings fail before the model loads
    directory = s["model"] if model is None else model
    pretrained = load(directory, dtype=s["dtype"], stream_weights=s["stream_weights"])
    lm = text_task(
        pretrained, train, prompt, reward,
        answer_tokens=s["answer_tokens"], eval_problems=held, chat=s["chat"],
        batch_size=s["batch_size"], temperature=s["temperature"], top_p=s["top_p"],
        embeddings=s["embeddings"], quantize=s["int8"], chunk_size=s["chunk_size"],
    )  # fmt: skip
    return pretrained, lm, strategy


def load_run(run: str, checkpoint_step: int | None = None, argument: str = "run_dir"):
    """``(settings, pretrained, text_task, strategy, step, state)`` of a finetune run at
    checkpoint ``checkpoint_step`` (default: the newest readable one); errors name
    ``argument``."""
    from jaxes.training import init_state

    s, _ = read_run(run, argument)
    directory = rundir.checkpoints_of(run)
    if not checkpoint.complete_steps(directory):
        raise checkpoint.CheckpointError(f"checkpoint: {run} has no complete checkpoint yet")
    pretrained, lm, strategy = build(s)
    like = init_state(strategy, lm.task, s["seed"])
    step, state = checkpoint.restore_run_state(directory, like, checkpoint_step)
    return s, pretrained, lm, strategy, step, state


def export_run(run: str, out: str, dtype: str | None = None) -> tuple[str, int, list[str]]:
    """Writes the newest checkpointed centre of the finetune run ``run``, merged with the
    params the search left frozen, as the model directory ``out`` (``jaxes.llm.export``);
    returns ``(out, generation, files)``. ``out`` must be new or empty: nothing is
    overwritten, and nothing is written when any step fails."""
    from jaxes.llm import ModelError, export
    from jaxes.strategies import centre

    out = os.path.abspath(out)
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise ModelError(f"out: {out} exists and is not an empty folder; nothing was written")
    _, pretrained, lm, _, step, state = load_run(run, argument="export")
    files = export(pretrained, lm.merge(centre(state.strategy_state)), out, dtype=dtype)
    return out, step, files
