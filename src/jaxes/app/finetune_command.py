"""``jaxes finetune``: a Hugging Face checkpoint fine-tuned by ES on text problems, in a run
directory as ``jaxes train`` writes one; ``jaxes export``: a finetune run's centre written back
as a model directory. Their flags (``FINETUNE_FLAGS``) and the lines they print.

The run is ``jaxes.training.run``'s (checkpoints, ``--resume``, trackers, the progress line,
the held-out evaluation as ``eval_return``); ``jaxes.app.finetune`` builds what it trains.
"""

from __future__ import annotations

import os

from jaxes.app.finetune import DEFAULTS, EVAL_PROBLEMS, TASKS
from jaxes.training import checkpoint

# (flag, setting, type, help); every flag left out is ``None``: the default
# (``jaxes.app.finetune.DEFAULTS``), or the resumed run's setting. The defaults are the papers'
# where they fit a laptop (σ 1e-3 and α 5e-4: Qiu et al. 2025; rank 1: EGGROLL; P 32, even for
# antithetic pairs, near Qiu's 30), and small enough elsewhere (4 prompts of 64 answer tokens)
# that 20 generations of the tiny test model take about a minute on a 2-core CPU.
FINETUNE_FLAGS = [
    ("--model", "model", str, "a Hugging Face model directory on disk (Qwen2/2.5, Qwen3, "
     "Llama 3); required unless resuming"),
    ("--task", "task", str, f"the problems: {TASKS}; countdown is Qiu et al.'s prompt and "
     "reward, jsonl the question as the prompt and a numeric answer"),
    ("--reward", "reward", str, "your own reward, FILE.py:NAME: a function reward(problem, "
     "completion) -> float, or a JAX one over tokens marked over_tokens = True (default: the "
     "task's)"),
    ("--population", "population_size", int, "population size P (even: antithetic pairs)"),
    ("--rank", "rank", int, "rank r of each member's perturbation of a matrix"),
    ("--sigma", "sigma", float, "perturbation scale σ"),
    ("--learning-rate", "learning_rate", float, "α of the plain step θ += α (1/P) Σ zᵢ εᵢ over "
     "z-scored rewards zᵢ (Qiu et al.'s α)"),
    ("--generations", "generations", int, "generations to run (in total, when resuming)"),
    ("--answer-tokens", "answer_tokens", int, "tokens each member writes per prompt"),
    ("--batch-size", "batch_size", int, "training prompts per generation, the same for all"),
    ("--chunk-size", "chunk_size", int, "members decoded at once (default: all P); it must "
     "divide the members on each device: smaller chunks hold fewer KV caches, larger ones read "
     "the weights fewer times"),
    ("--problems", "problems", int, "Countdown training problems (countdown only)"),
    ("--eval-problems", "eval_problems", int, "held-out problems the centre answers greedily "
     f"at each evaluation (default: countdown {EVAL_PROBLEMS} of another seed, none of them "
     f"trained on; jsonl the file's last fifth, at most {EVAL_PROBLEMS})"),
    ("--eval-every", "eval_every", int, "generations per fused block and between evaluations"),
    ("--checkpoint-every", "checkpoint_every", int, "generations between checkpoints (default: "
     f"--eval-every); the newest {checkpoint.KEEP} are kept"),
    ("--temperature", "temperature", float, "members sample at this temperature (0: greedy)"),
    ("--top-p", "top_p", float, "members sample from this much of the probability (nucleus)"),
    ("--dtype", "dtype", str, "the params' dtype (default: the checkpoint's)"),
    ("--int8", "int8", "flag", "members read an int8 copy of the centre's matrices"),
    ("--stream-weights", "stream_weights", "flag", "read each layer's weights where they are "
     "used, converting one layer at a time (the memory plan's setting; docs/llm.md)"),
    ("--embeddings", "embeddings", "flag", "search the token embeddings and an untied output "
     "head too (default: they stay the checkpoint's)"),
    ("--chat", "chat", "flag", "wrap each prompt as a user message in the chat template"),
    ("--seed", "seed", int, "random seed; the same seed gives the same run"),
    ("--devices", "devices", int, "devices to split the population over (0: every GPU or TPU, "
     "one CPU device; a reward in Python runs on one CPU device)"),
]  # fmt: skip
DTYPES = ("float32", "bfloat16")


def finetune_arguments(sub) -> None:
    """The parsers of ``jaxes finetune`` and ``jaxes export``."""
    finetune = sub.add_parser(
        "finetune",
        help="fine-tune a Hugging Face checkpoint with ES",
        description="Fine-tune a Hugging Face model directory with OpenAI-ES and low-rank "
        "members (jaxes.llm) on text problems and a reward. Writes config.json, metrics.jsonl "
        "(eval_return: the centre's mean reward on the held-out problems, greedy), "
        "checkpoints/ and (with the plot extra) learning_curve.png into --out, as `jaxes train` "
        "does; `jaxes export RUN --out DIR` writes the fine-tuned model.",
    )
    for flag, field, kind, text in FINETUNE_FLAGS:
        how = {"action": "store_true"} if kind == "flag" else {"type": kind}
        if field == "dtype":
            how["choices"] = DTYPES
        if "(default" not in text and field != "model":
            text = f"{text} (default: {'off' if kind == 'flag' else DEFAULTS[field]})"
        finetune.add_argument(flag, dest=field, default=None, help=text, **how)
    finetune.add_argument(
        "--out", default=None, help="run directory (default: runs/finetune-MODEL-DATE-TIME)"
    )
    finetune.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out from its newest checkpoint, with its settings (only "
        "--generations may change)",
    )
    finetune.add_argument(
        "--log",
        default=None,
        metavar="TRACKERS",
        help="log to experiment trackers too: tensorboard, wandb, mlflow, csv, or a comma list; "
        "--resume continues the run's own unless given",
    )
    export = sub.add_parser(
        "export",
        help="write a finetune run's model as a Hugging Face directory",
        description="Write the newest checkpointed centre of a `jaxes finetune` run, with the "
        "params the search left frozen and the source's tokenizer files, as a model directory "
        "that transformers loads.",
    )
    export.add_argument("run_dir", help="a directory written by `jaxes finetune`")
    export.add_argument("--out", required=True, metavar="DIR", help="the directory to write")
    export.add_argument(
        "--dtype", default=None, choices=DTYPES, help="weights' dtype (default: the source's)"
    )


def finetune_command(args) -> int:
    """Runs ``jaxes finetune`` with the parsed ``args``; returns the exit status."""
    from jaxes.app import finetune
    from jaxes.app.errors import fail
    from jaxes.app.train_command import RUN_DIR
    from jaxes.training import loggers, rundir

    given = {f: getattr(args, f) for _, f, _, _ in FINETUNE_FLAGS if getattr(args, f) is not None}
    if args.resume:
        if args.out is None:
            return fail("--resume needs --out RUN, the run to continue")
        saved, path = finetune.read_run(args.out, "--resume")
        # A flag may repeat a setting or change generations, nothing else.
        for name, value in finetune.settings(given, saved).items():
            if name != "generations" and value != saved[name]:
                return fail(
                    f"resume: {name}={value!r} differs from the run's {saved[name]!r} in "
                    f"{path}; only --generations may change"
                )
        settings = {**saved, "generations": given.get("generations", saved["generations"])}
    else:
        settings = finetune.settings(given, DEFAULTS)
    from jaxes import parallel

    # Before JAX starts: on a CPU one device unless more are asked for (see ``_devices``).
    parallel.use_cpu_cores(max(settings["devices"], 1))
    pretrained, lm, strategy = finetune.build(settings, model=args.model)
    settings["devices"] = _devices(settings["devices"], lm.reward)
    out = args.out if args.out is not None else rundir.default_out(f"finetune-{_name(settings)}")
    RUN_DIR[0] = out
    logs = args.log
    if logs is None and args.resume:  # the trackers the run logged to, continued
        logs = loggers.recorded(out)
    summary = _train(finetune, settings, lm, strategy, out, args.resume, logs)
    _print_result(summary, settings, out)
    return 0


def _name(settings: dict) -> str:
    return os.path.basename(os.path.normpath(settings["model"]))


def _devices(devices: int, reward) -> int:
    """The devices the runner splits over: on a CPU one unless asked, and only one under a
    reward in Python (its host callback, called from several CPU devices at once, can wait
    for a CPU device that waits for it)."""
    import jax

    from jaxes.app.checks import ConfigError

    if jax.default_backend() != "cpu":
        return devices
    if devices > 1 and not getattr(reward, "over_tokens", False):
        raise ConfigError(
            "devices: a reward in Python runs on one CPU device; give --devices 1 (the default "
            "on a CPU), or a JAX reward over tokens (over_tokens = True)"
        )
    return devices or 1


def _train(finetune, settings, lm, strategy, out, resume, logs) -> dict:
    """``jaxes.training.run`` of the built task; a reward that raised is one line naming the
    prompt, and the run's checkpoints stay as they were."""
    from jaxes import training
    from jaxes.llm.text_task import RewardError
    from jaxes.training import rundir

    title = (
        f"open_es, rank-{settings['rank']} members of {_name(settings)} on "
        f"{settings['task'].split(':')[0]}, P={settings['population_size']}"
    )
    try:
        return training.run(
            strategy, lm.task, out, config=finetune.run_config(settings), resume=resume,
            loggers=logs, title=title, **finetune.loop_settings(settings),
        )  # fmt: skip
    except Exception as err:
        failure = getattr(lm.reward, "failure", None)
        if failure is None:
            raise
        steps = checkpoint.complete_steps(rundir.checkpoints_of(out))
        then = (
            f"then continue from generation {steps[-1]}: `jaxes finetune --out {out} --resume`"
            if steps
            else "and run the same command again (no checkpoint yet)"
        )
        line = failure.replace("\n", " ")  # the user's exception text may span lines
        raise RewardError(f"{line}; fix the reward {then}") from err


def _print_result(summary: dict, settings: dict, out: str) -> None:
    ret = summary["final_eval_return"]
    shown = "n/a" if ret is None else f"{ret:.3f}"
    print(
        f"done: held-out reward {shown} (the centre, greedy, {settings['eval_problems']} "
        f"problems) after {summary['generations']} generations ({summary['seconds']} s)."
    )
    plot = ", learning_curve.png" if summary.get("plot") else ""
    print(f"files: {os.path.abspath(out)}/ (config.json, metrics.jsonl, checkpoints/{plot})")
    print(f"the model: jaxes export {out} --out DIR")


def export_command(args) -> int:
    """``jaxes export``: a finetune run's newest centre as a Hugging Face model directory."""
    from jaxes.app import finetune

    out, step, _ = finetune.export_run(args.run_dir, args.out, dtype=args.dtype)
    print(f"wrote {out}: generation {step} of {args.run_dir}")
    return 0
