"""The run lifecycle at its edges: interrupts, locks, restarts, damaged runs, bad config files,
through the real `jaxes` command (one stderr line, the exit code, the files left) and through
the runner API, which gives a user's own task the same guarantees."""

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TINY_FLAGS
from helpers import number, strategies

import jaxes
from jaxes import training
from jaxes.app import cli, train
from jaxes.app import config as config_lib
from jaxes.app.build import build
from jaxes.app.config import TrainConfig
from jaxes.tasks.control import running_stats
from jaxes.tasks.functions import function_task
from jaxes.training import checkpoint, compilation, rundir
from jaxes.types import Task


def jaxes_cmd(*args, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "jaxes", *args], capture_output=True, text=True, **kwargs
    )


def one_error_line(proc, code=2):
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr


def snapshot(directory):
    """Every file under ``directory`` with its bytes, to show nothing was changed."""
    files = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, directory)] = f.read()
    return files


@pytest.fixture
def run_copy(tiny_run, tmp_path):
    """A private copy of the shared 20-generation run (checkpoints 10, 15, 20)."""
    out = tmp_path / "run"
    shutil.copytree(tiny_run, out)
    return out


# --- the command ---------------------------------------------------------------------------


def test_version_and_a_closed_pipe():
    proc = jaxes_cmd("--version")
    assert proc.returncode == 0 and proc.stdout == f"jaxes {jaxes.__version__}\n"
    # `jaxes envs | head -1`: the reader goes away; no "Broken pipe" message, no failure.
    with subprocess.Popen(
        [sys.executable, "-m", "jaxes", "envs"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
    ) as proc:
        proc.stdout.close()
        err = proc.stderr.read()
    assert proc.returncode == 0 and err == b""


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--seed", str(2**31)], "seed: expected an int in [0, 2147483647], got 2147483648"),
        (["--out", ""], "out: expected a directory path, got ''"),
    ],
)
def test_bad_inputs_write_nothing(tmp_path, flags, message):
    out = [] if "--out" in flags else ["--out", str(tmp_path / "r")]
    err = one_error_line(jaxes_cmd("train", *flags, *out, cwd=tmp_path))
    assert message in err
    assert os.listdir(tmp_path) == []


def test_sigint_during_the_first_compile_exits_130_and_the_run_restarts_in_place(tmp_path):
    out = tmp_path / "run"
    # A cold compile cache, so that the first block is still compiling when the signal comes.
    env = {**os.environ, "JAXES_CACHE_DIR": str(tmp_path / "cold-cache")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jaxes", "train", *TINY_FLAGS, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout.readline().startswith("jaxes: ")  # the run is set up
    time.sleep(2.0)  # inside XLA's compile of the first block
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 5.0
    assert proc.returncode == 130  # not a core dump (-11 / 139), not swallowed (0)
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "before the first checkpoint; run the same command again" in err
    assert not (out / "checkpoints" / "5").exists()
    # The same command again starts over in the same directory: no `rm` needed.
    again = jaxes_cmd("train", *TINY_FLAGS, "--out", str(out), timeout=600)
    assert again.returncode == 0, again.stderr
    assert "starting again from generation 0" in again.stdout
    records, _ = rundir.read_metrics(str(out / "metrics.jsonl"))
    assert [x["generation"] for x in records] == list(range(1, 21))


def test_a_second_writer_is_refused_while_the_first_holds_the_lock(run_copy):
    before = snapshot(run_copy)
    with rundir.lock(str(run_copy)):  # a writer at work (any process holding the flock)
        second = jaxes_cmd("train", "--out", str(run_copy), "--resume", "--generations", "30")
    assert "another process is writing to" in one_error_line(second)
    assert snapshot(run_copy) == before  # nothing of the first writer's run was touched
    # Once the lock is released (the writer ended, or died: the OS drops an flock) it works.
    proc = jaxes_cmd("train", "--out", str(run_copy), "--resume", "--generations", "25")
    assert proc.returncode == 0, proc.stderr
    records, _ = rundir.read_metrics(str(run_copy / "metrics.jsonl"))
    assert [x["generation"] for x in records] == list(range(1, 26))
    assert json.loads((run_copy / "config.json").read_text())["generations"] == 25


def test_resume_with_as_many_or_fewer_generations(run_copy):
    before = snapshot(run_copy)
    err = one_error_line(
        jaxes_cmd("train", "--out", str(run_copy), "--resume", "--generations", "10")
    )
    assert "generations: the run has done 20 generations already" in err
    assert snapshot(run_copy) == before
    # Repeating the saved settings is not a change; 20 of 20 done is a finished run.
    proc = jaxes_cmd(
        "train", "--out", str(run_copy), "--resume", "--population", "8", "--sigma", "0.05"
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "after 20 generations" in proc.stdout and "return n/a" not in proc.stdout


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda c: [c], "config.json: expected a JSON object of settings"),
        (lambda c: {**c, "hidden_sizes": 32}, "config.json: hidden_sizes: expected a list"),
        (lambda c: {k: v for k, v in c.items() if k != "sigma"}, "missing settings ['sigma']"),
        (lambda c: {**c, "colour": "red"}, "config.json: unknown settings ['colour']"),
        (lambda c: "{not json", "config.json: not valid JSON"),
    ],
)
def test_a_malformed_config_names_the_file_and_the_field(run_copy, edit, message):
    config = json.loads((run_copy / "config.json").read_text())
    edited = edit(config)
    text = edited if isinstance(edited, str) else json.dumps(edited)
    (run_copy / "config.json").write_text(text)
    before = snapshot(run_copy)
    for argv in (["train", "--out", str(run_copy), "--resume"], ["eval", str(run_copy)]):
        err = one_error_line(jaxes_cmd(*argv))
        assert message in err and str(run_copy) in err
    assert snapshot(run_copy) == before


def test_an_edited_env_is_a_shape_error_not_a_traceback(run_copy):
    config = json.loads((run_copy / "config.json").read_text())
    (run_copy / "config.json").write_text(json.dumps({**config, "env": "hopper"}))
    err = one_error_line(jaxes_cmd("train", "--out", str(run_copy), "--resume"))
    assert "does not fit this run's settings" in err and "was config.json edited?" in err


def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(run_copy):
    for root, _, names in os.walk(run_copy / "checkpoints" / "20"):
        for name in names:
            if os.path.basename(root) == "d":  # the array data
                os.truncate(os.path.join(root, name), 10)
    with open(run_copy / "metrics.jsonl", "a") as f:
        f.write('{"generation": 21, "fitn')  # a line cut by a kill mid-write
    proc = jaxes_cmd("train", "--out", str(run_copy), "--resume", timeout=600)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "skipping a damaged checkpoint, moved to" in proc.stdout
    assert "resuming from checkpoint 15" in proc.stdout
    assert (run_copy / "checkpoints" / "20.damaged").is_dir()  # kept, not deleted
    assert (run_copy / "checkpoints" / "20").is_dir()  # written again
    records, dropped = rundir.read_metrics(str(run_copy / "metrics.jsonl"))
    assert not dropped and [x["generation"] for x in records] == list(range(1, 21))


def test_a_damaged_metadata_file_is_read_past_without_orbax_logs(run_copy):
    # orbax restores without its _CHECKPOINT_METADATA, logging ERROR lines through absl; the
    # CLI's output stays the one result line.
    (run_copy / "checkpoints" / "20" / "_CHECKPOINT_METADATA").write_text("garbage")
    proc = jaxes_cmd("eval", str(run_copy), timeout=600)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "generation 20" in proc.stdout and proc.stdout.count("\n") == 1


def test_unreadable_checkpoints_everywhere_are_one_line(run_copy):
    for root, dirs, _ in os.walk(run_copy / "checkpoints"):
        for name in dirs:
            if name == "d":
                shutil.rmtree(os.path.join(root, name))  # every array file is gone
    before = snapshot(run_copy)
    for argv in (["train", "--out", str(run_copy), "--resume"], ["eval", str(run_copy)]):
        err = one_error_line(jaxes_cmd(*argv))
        assert "can be read" in err
    assert snapshot(run_copy) == before


def test_a_full_disk_is_one_line(run_copy):
    # A file-size limit a little above metrics.jsonl's size stands in for a full disk; the
    # shell sets it (no preexec_fn: forking a multithreaded JAX process can deadlock), and an
    # ignored SIGXFSZ turns the kill into EFBIG errors. bash counts ulimit -f in KiB.
    limit_kib = os.path.getsize(run_copy / "metrics.jsonl") // 1024 + 1
    command = [sys.executable, "-m", "jaxes", "train", "--out", str(run_copy), "--resume"]
    proc = subprocess.run(
        ["bash", "-c", f"trap '' XFSZ; ulimit -f {limit_kib}; exec \"$@\"", "bash", *command]
        + ["--generations", "30"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "File too large" in one_error_line(proc)
    records, _ = rundir.read_metrics(str(run_copy / "metrics.jsonl"))
    assert [x["generation"] for x in records][:20] == list(range(1, 21))  # nothing lost


def test_eval_and_render_pick_a_checkpoint_and_an_episode_length(run_copy, monkeypatch, capsys):
    argv = ("eval", str(run_copy), "--checkpoint", "15", "--episode-length", "30")
    proc = jaxes_cmd(*argv)
    assert proc.returncode == 0, proc.stderr
    assert "generation 15," in proc.stdout and "up to 30 steps" in proc.stdout
    printed = number(r"return", proc.stdout)
    assert 0 < printed <= 30, proc.stdout  # the pendulum earns 1 per step: 30 steps at most
    # The return is evaluate_policy's (seed 0, eval's default of 16 episodes) on checkpoint
    # 15's centre with 30-step episodes (compiled as eval compiles it: the command's program,
    # read back from the compile cache).
    config, _, _, step, state = train.load_run(str(run_copy), 15)
    _, task = build(config.replace(episode_length=30, eval_episodes=16))
    params = jaxes.centre(state.strategy_state)
    inputs = (jax.random.key(0), params, state.task_state)
    expected = compilation.compile(jax.jit(task.evaluate_policy).lower(*inputs))(*inputs)
    assert step == 15 and abs(printed - float(np.mean(expected))) <= 0.005, (printed, expected)
    # Every checkpoint of this run returns 30.00 (the pendulum is solved at once), so which one
    # eval read shows in the params it evaluates: the same command in-process, its compiled
    # evaluation spied on.
    evaluated = []

    def spy(lowered):
        run = real_compile(lowered)
        return lambda *inputs: evaluated.append(inputs[1]) or run(*inputs)

    real_compile = compilation.compile
    monkeypatch.setattr(compilation, "compile", spy)
    assert cli.main(list(argv)) == 0
    assert capsys.readouterr().out == proc.stdout  # the same line as the command's
    [seen] = evaluated
    assert max_diff(seen, params) == 0.0
    newest = jaxes.centre(train.load_run(str(run_copy), 20)[4].strategy_state)
    assert max_diff(seen, newest) > 0  # checkpoint 20's params would show
    err = one_error_line(jaxes_cmd("render", str(run_copy), "--checkpoint", "7"))
    assert "no checkpoint 7" in err and "[10, 15, 20]" in err


def max_diff(a, b):
    pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return max(float(jnp.max(jnp.abs(x - y))) for x, y in pairs)


# --- the API -------------------------------------------------------------------------------


def test_train_run_refuses_a_config_that_differs_from_the_runs(run_copy):
    before = snapshot(run_copy)
    saved = json.loads((run_copy / "config.json").read_text())
    changed = TrainConfig.from_dict({**saved, "sigma": 0.2})
    with pytest.raises(rundir.RunDirError, match="sigma=0.2 differs from the run's 0.05"):
        train.train_config(changed, str(run_copy), resume=True, stream=io.StringIO())
    assert snapshot(run_copy) == before


def test_a_config_json_written_before_a_setting_was_added_loads_with_its_default(run_copy):
    saved = json.loads((run_copy / "config.json").read_text())
    older = {k: v for k, v in saved.items() if k not in config_lib.ADDED_LATER}
    assert TrainConfig.from_dict(older) == TrainConfig.from_dict(saved)
    with pytest.raises(config_lib.ConfigError, match=r"missing settings \['sigma'\]"):
        TrainConfig.from_dict({k: v for k, v in saved.items() if k != "sigma"})


def test_a_run_written_before_settings_were_added_resumes_and_keeps_its_file(run_copy):
    """The runner refuses a config.json that lacks a setting; a run from before
    ``ADDED_LATER``'s settings is recorded without them, so `--resume` continues it."""
    path = run_copy / "config.json"
    saved = json.loads(path.read_text())
    older = {k: v for k, v in saved.items() if k not in config_lib.ADDED_LATER}
    path.write_text(json.dumps(older))
    proc = jaxes_cmd("train", "--out", str(run_copy), "--resume", "--generations", "25")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(path.read_text()) == {**older, "generations": 25}
    assert checkpoint.complete_steps(rundir.checkpoints_of(str(run_copy)))[-1] == 25


def test_load_policy_is_the_trained_act_with_its_normalisation(tiny_run):
    _, _, task, _, state = train.load_run(str(tiny_run))
    act = train.load_policy(str(tiny_run), checkpoint_step=20)
    obs = jnp.array([[0.1, -0.2, 0.3, 0.05], [0.0, 0.0, 0.0, 0.0]])
    stats = state.task_state.obs_stats
    params = jaxes.centre(state.strategy_state)
    expected = task.policy.apply(params, running_stats.normalize(stats, obs))
    np.testing.assert_allclose(act(obs), expected, rtol=1e-6)
    unnormalised = task.policy.apply(params, obs)
    assert float(jnp.max(jnp.abs(unnormalised - expected))) > 1e-3  # normalisation matters


def test_render_plays_the_episode_evaluation_plays(tiny_run):
    """A replay and an evaluation see the policy training saw: the same act, the same
    normalisation, so the same return from the same start."""
    from jaxes.tasks.brax import render

    config, _, task, _, state = train.load_run(str(tiny_run))
    key = jax.random.key(3)
    params = jaxes.centre(state.strategy_state)
    _, total = render.rollout_states(task, params, state.task_state, config.env.episode_length, key)
    returns = jax.jit(task.evaluate_policy)(key, params, state.task_state)
    np.testing.assert_allclose(total, float(returns[0]), rtol=1e-5)
    # Without the run's statistics the policy acts differently: the check can fail.
    blank = task.init(None)
    _, other = render.rollout_states(task, params, blank, config.env.episode_length, key)
    assert other != total


def user_task(dim=3):
    """A user's own task (not Brax): a shifted sphere with a per-member statistic."""
    base = function_task("sphere", dim)

    def evaluate(key, members, task_state):
        fitness, _, info = base.evaluate(key, members, task_state)
        return fitness, {"sq": -fitness}, info

    return Task(
        init=base.init,
        evaluate=evaluate,
        evaluate_policy=base.evaluate_policy,
        init_params=base.init_params,
        update=lambda state, stats: state,
    )


STRATEGIES = strategies(8, 0.1, guided_es=dict(past_steps=True))  # its basis is checkpointed


def quiet_run(strategy, task, out, **kwargs):
    return training.run(strategy, task, str(out), stream=io.StringIO(), plot=False, **kwargs)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_the_runner_resumes_a_users_task_bit_identically(name, tmp_path):
    """Every strategy with the default noise table: stopped at 4 and resumed to 6 equals a
    straight run of 6."""
    es, task = STRATEGIES[name](), user_task()
    calls = []
    quiet_run(es, task, tmp_path / "whole", generations=6, eval_every=2, config={"note": "x"})
    quiet_run(
        es,
        task,
        tmp_path / "parts",
        generations=4,
        eval_every=2,
        config={"note": "x"},
        progress_fn=lambda g, m: calls.append((g, sorted(m))),
    )
    summary = quiet_run(
        es, task, tmp_path / "parts", generations=6, eval_every=2, config={"note": "x"}, resume=True
    )
    assert summary["start_generation"] == 4 and summary["generations"] == 6
    assert [g for g, _ in calls] == [2, 4] and "eval_return" in calls[0][1]
    assert json.loads((tmp_path / "parts" / "config.json").read_text())["generations"] == 6
    a = training.init_state(es, task, 0)
    ckpt_a = checkpoint.Checkpointer(str(tmp_path / "whole" / "checkpoints"))
    ckpt_b = checkpoint.Checkpointer(str(tmp_path / "parts" / "checkpoints"))
    _, whole = ckpt_a.restore(a)
    _, parts = ckpt_b.restore(training.init_state(es, task, 0))
    ckpt_a.close(), ckpt_b.close()
    for x, y in zip(jax.tree.leaves(whole), jax.tree.leaves(parts), strict=True):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    with pytest.raises(rundir.RunDirError, match="note='y' differs from the run's 'x'"):
        quiet_run(
            es,
            task,
            tmp_path / "parts",
            generations=8,
            eval_every=2,
            config={"note": "y"},
            resume=True,
        )


def test_the_runner_restarts_a_run_stopped_before_its_first_checkpoint(tmp_path):
    es, task = jaxes.open_es(8, 0.1), function_task("sphere", 3)

    def stop(generation, metrics):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        quiet_run(
            es,
            task,
            tmp_path / "r",
            generations=4,
            eval_every=2,
            checkpoint_every=4,
            progress_fn=stop,
        )
    assert not (tmp_path / "r" / "checkpoints" / "4").exists()
    out = io.StringIO()
    training.run(
        es,
        task,
        str(tmp_path / "r"),
        generations=4,
        eval_every=2,
        checkpoint_every=4,
        stream=out,
        plot=False,
    )
    assert "starting again from generation 0" in out.getvalue()
    records, _ = rundir.read_metrics(str(tmp_path / "r" / "metrics.jsonl"))
    assert [x["generation"] for x in records] == [1, 2, 3, 4]


def test_metrics_are_strict_json_when_fitness_overflows(tmp_path):
    base = function_task("sphere", 3)
    task = Task(
        init=base.init,
        evaluate=lambda k, m, s: (jnp.full(m.shape[0], jnp.inf), None, base.evaluate(k, m, s)[2]),
        evaluate_policy=lambda k, p, s: jnp.full(1, -jnp.inf),
        init_params=base.init_params,
    )
    quiet_run(jaxes.open_es(8, 0.1), task, tmp_path / "r", generations=2, eval_every=2)
    lines = (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(x, parse_constant=lambda c: pytest.fail(f"non-JSON {c}")) for x in lines]
    assert records[-1]["fitness_mean"] is None and records[-1]["eval_return"] is None


def test_a_bad_metrics_line_before_the_end_names_the_file_and_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"generation": 1}\nnot json\n{"generation": 3}\n')
    with pytest.raises(rundir.RunDirError, match=r"metrics.jsonl: line 2 is not a metrics"):
        rundir.read_metrics(str(path))
