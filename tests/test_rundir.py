"""The run directory has one owner (``jaxes.training.rundir``), and a run says what it keeps
and shows: absolute paths in its summaries, the statistic of a ``--seeds`` progress line, the
checkpoints it keeps."""

import dataclasses
import io
import json
import os

import jax.numpy as jnp
import pytest

import jaxes
from jaxes import training
from jaxes.app import cli
from jaxes.tasks.functions import function_task
from jaxes.training import checkpoint, rundir


@pytest.fixture(scope="module")
def seeds_run(tmp_path_factory):
    """Two seeds of a function task, run from the directory above a relative ``out``, with
    plots, one checkpoint per generation; the summary and the progress text."""
    where = tmp_path_factory.mktemp("cwd")
    here = os.getcwd()
    os.chdir(where)
    try:
        stream = io.StringIO()
        es, task = jaxes.open_es(8, sigma=0.1), function_task("sphere", 3)
        summary = training.run_seeds(
            es, task, "runs", seeds=[0, 1], generations=5, eval_every=1, stream=stream
        )
    finally:
        os.chdir(here)
    return where / "runs", summary, stream.getvalue()


def test_the_seeds_progress_line_says_which_statistic_it_shows(seeds_run):
    _, _, text = seeds_run
    lines = [x for x in text.splitlines() if x.startswith("gen ")]
    assert len(lines) == 5
    assert all("median over 2 seeds: mean" in x for x in lines)


def test_one_run_progress_line_names_no_statistic(tmp_path):
    stream = io.StringIO()
    es, task = jaxes.open_es(8, sigma=0.1), function_task("sphere", 3)
    training.run(es, task, str(tmp_path / "r"), generations=2, eval_every=2, stream=stream,
                 plot=False)  # fmt: skip
    (line,) = [x for x in stream.getvalue().splitlines() if x.startswith("gen ")]
    assert "median" not in line and line.split()[2] == "mean"
    assert "warning" not in stream.getvalue()


def test_a_generation_with_no_finite_fitness_is_one_warning_line_per_block(tmp_path):
    """``tell`` skips such a generation (``info.applied`` is False), silently until issue 59."""
    stream = io.StringIO()
    es, task = jaxes.open_es(8, sigma=0.1), function_task("sphere", 3)

    def evaluate(key, members, task_state):
        fitness, stats, info = task.evaluate(key, members, task_state)
        return jnp.full_like(fitness, jnp.nan), stats, info

    blank = dataclasses.replace(task, evaluate=evaluate)
    training.run(es, blank, str(tmp_path / "r"), generations=4, eval_every=2, stream=stream,
                 plot=False)  # fmt: skip
    warned = [x for x in stream.getvalue().splitlines() if x.startswith("warning:")]
    assert warned == [
        f"warning: generation {g} had no finite fitness (every value NaN or ±inf), so its "
        "update was skipped (1 more generation like it after it)"
        for g in (1, 3)
    ]


def test_summaries_hold_absolute_paths(seeds_run):
    out, summary, _ = seeds_run
    with open(out / rundir.SUMMARY) as f:
        assert json.load(f) == summary
    assert summary["plot"] == str(out / rundir.LEARNING_CURVES)
    for run in summary["runs"]:
        seed_dir = rundir.seed_dir(str(out), run["seed"])
        assert run["run_dir"] == seed_dir
        assert run["plot"] == os.path.join(seed_dir, rundir.LEARNING_CURVE)
        assert os.path.isfile(run["plot"])


def test_only_the_newest_checkpoints_are_kept_and_the_help_and_docs_say_so(seeds_run, capsys):
    out, _, _ = seeds_run
    for seed in (0, 1):
        steps = checkpoint.complete_steps(rundir.checkpoints_of(rundir.seed_dir(str(out), seed)))
        assert steps == [3, 4, 5] and len(steps) == checkpoint.KEEP
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"generations between checkpoints; the newest {checkpoint.KEEP} are kept" in help_text
    assert f"the newest {checkpoint.KEEP} (``checkpoint.KEEP``) are kept" in " ".join(
        training.run.__doc__.split()
    )


def test_resume_targets_and_seed_directories_come_from_rundir(seeds_run, tmp_path):
    out, _, _ = seeds_run
    seeds, config = rundir.resume_target(str(out))
    assert seeds == [0, 1] and config == os.path.join(rundir.seed_dir(str(out), 0), "config.json")
    with pytest.raises(rundir.RunDirError, match=r"^--seeds: .* holds the runs of seeds \[0, 1\]"):
        rundir.resume_target(str(out), [0, 2])
    with pytest.raises(rundir.RunDirError, match=r"^seeds: .* holds the runs of seeds \[0, 1\]"):
        rundir.open_seeds(str(out), [0, 2], resume=True, primary=False)
    with pytest.raises(rundir.RunDirError, match="name one of them, e.g. .*/seed-0"):
        rundir.config_of(str(out), "--resume")
    seeds, config = rundir.resume_target(str(out / "seed-1"))
    assert seeds is None and config == str(out / "seed-1" / "config.json")
    with pytest.raises(rundir.RunDirError, match="--resume: .* holds no run"):
        rundir.resume_target(str(tmp_path))
