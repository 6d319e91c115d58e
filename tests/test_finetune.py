"""`jaxes finetune` and `jaxes export` on a tiny real checkpoint (tests/fixtures/hf/qwen2-tied):
a run through the command, resumed, exported and loaded back as the run's centre; one-line
errors that write nothing; a reward that raises leaves the run's checkpoints as they were.

The reward is a user's file (`--reward FILE.py:NAME`), the way a user brings their own: the
tiny random model scores 0 on every Countdown problem, so a reward of the completion's
characters is what makes members differ and the centre move."""

import contextlib
import io
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxes.app import cli, finetune
from jaxes.llm import load
from jaxes.strategies import centre

QWEN = Path(__file__).parent / "fixtures" / "hf" / "qwen2-tied"
TINY = [
    "--population", "4", "--sigma", "0.05", "--learning-rate", "1", "--eval-every", "2",
    "--answer-tokens", "4", "--batch-size", "2", "--problems", "8", "--eval-problems", "2",
]  # fmt: skip
SCORE = "def score(problem, completion):\n    return float(sum(map(ord, completion)) % 7)\n"
RAISES = "def score(problem, completion):\n    raise KeyError('score')\n"


def run_main(*argv):
    """``(code, stdout, stderr)`` of ``jaxes ARGV`` run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main([str(a) for a in argv])
        except SystemExit as stop:
            code = stop.code
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run through the command, shared read-only: 2 generations; a resume to 4 whose reward
    now raises (it fails, and leaves the run as it was); the same resume once the reward is
    fixed (checkpoints 2 and 4). The outputs, and the interrupt line the last would print."""
    tmp = tmp_path_factory.mktemp("finetune")
    reward = tmp / "rewards.py"
    reward.write_text(SCORE)
    out = tmp / "run"
    first = run_main(
        "finetune", "--model", QWEN, "--reward", f"{reward}:score", *TINY,
        "--generations", "2", "--out", out,
    )  # fmt: skip
    assert first[0] == 0, first[2]
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    reward.write_text(RAISES)
    failed = run_main("finetune", "--out", out, "--resume", "--generations", "4")
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    kept = sorted(int(p.name) for p in (out / "checkpoints").iterdir())
    reward.write_text(SCORE)
    again = run_main("finetune", "--out", out, "--resume", "--generations", "4")
    assert again[0] == 0, again[2]
    return {
        "out": out, "first": first[1], "failed": failed, "again": again[1], "kept": kept,
        "changed": sorted(k for k in before if before[k] != after.get(k)),
        "interrupted": cli._interrupt_message(signal.SIGTERM),
    }  # fmt: skip


def test_a_run_writes_its_directory_and_resumes_to_more_generations(run):
    out, first, again = run["out"], run["first"], run["again"]
    assert "held-out reward" in first and "after 2 generations" in first
    assert f"jaxes export {out} --out DIR" in first
    assert "resuming from checkpoint 2" in again and "after 4 generations" in again
    assert {"config.json", "metrics.jsonl", "checkpoints"} <= {p.name for p in out.iterdir()}
    assert sorted(int(p.name) for p in (out / "checkpoints").iterdir()) == [2, 4]
    saved = json.loads((out / "config.json").read_text())
    assert saved["command"] == "finetune" and saved["model"] == str(QWEN.resolve())
    assert (saved["task"], saved["rank"], saved["population_size"]) == ("countdown", 1, 4)
    assert saved["reward"].endswith("rewards.py:score") and saved["generations"] == 4
    assert (saved["noise"], saved["optimizer"], saved["fitness_shaping"]) == (
        "lowrank", "sgd", "z_score",
    )  # fmt: skip
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["generation"] for x in lines] == [1, 2, 3, 4]
    assert [x["generation"] for x in lines if "eval_return" in x] == [2, 4]
    assert any(x["applied"] for x in lines)  # the members differed: the centre moved
    assert run["interrupted"] == (
        f"stopped by signal 15; continue with `jaxes finetune --out {out} --resume`"
    )


def test_a_reward_that_raises_is_one_line_naming_the_prompt_and_the_run_resumes_after(run):
    code, _, err = run["failed"]
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("jaxes: error: reward: KeyError: 'score' on the prompt 'A conversation")
    assert "of problem {'numbers': [" in err  # the problem tells the templated prompts apart
    assert f"continue from generation 2: `jaxes finetune --out {run['out']} --resume`" in err
    # Checkpoint 2 and the metrics stay; config.json records the generations asked for.
    assert run["kept"] == [2] and run["changed"] == ["config.json"]
    assert "resuming from checkpoint 2" in run["again"]


def test_the_exported_model_loads_back_as_the_runs_merged_centre(run, tmp_path):
    out = run["out"]
    code, printed, err = run_main("export", out, "--out", tmp_path / "model")
    assert code == 0, err
    assert printed == f"wrote {tmp_path / 'model'}: generation 4 of {out}\n"
    _, pretrained, lm, _, step, state = finetune.load_run(str(out))
    want = lm.merge(centre(state.strategy_state))
    got = load(tmp_path / "model").params
    assert step == 4 and jax.tree.structure(got) == jax.tree.structure(want)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(a, b)
    moved = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), got, pretrained.params)
    assert max(jax.tree.leaves(moved)) > 0 and moved["embed_tokens"]["embedding"] == 0.0
    before = sorted(p.name for p in (tmp_path / "model").iterdir())
    code, _, err = run_main("export", out, "--out", tmp_path / "model")
    assert code == 2 and "exists and is not an empty folder; nothing was written" in err
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == before
    code, _, err = run_main("export", out, "--out", tmp_path / "half", "--dtype", "bfloat16")
    assert code == 0, err
    assert load(tmp_path / "half").params["norm"]["weight"].dtype == jnp.bfloat16


def _copy(tmp_path, name="qwen2-tied"):
    out = tmp_path / name
    shutil.copytree(QWEN.parent / name, out)
    return out


def _edit_config(model, **changes):
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, **changes}))


def _bad_model(tmp_path, kind):
    """A model directory broken as ``kind`` says."""
    if kind == "hub name":
        return "Qwen/Qwen2.5-0.5B"
    if kind == "no config.json":
        return tmp_path
    if kind == "missing shard":
        model = _copy(tmp_path, "llama3-untied")
        (model / "model-00002-of-00003.safetensors").unlink()
        return model
    model = _copy(tmp_path)
    if kind == "unsupported family":
        _edit_config(model, model_type="gpt2")
    elif kind == "bad tensor shape":
        _edit_config(model, intermediate_size=96)
    elif kind == "no tokenizer":
        (model / "tokenizer.json").unlink()
    return model


@pytest.mark.parametrize(
    "kind, match",
    [
        ("hub name", "jaxes never downloads"),
        ("no config.json", "has no config.json; expected a Hugging Face model directory"),
        ("unsupported family", "model_type 'gpt2' is not supported"),
        ("missing shard", "shard model-00002-of-00003.safetensors is missing"),
        ("bad tensor shape", r"down_proj.weight has shape (64, 128)"),
        ("no tokenizer", "has no tokenizer.json"),
    ],
)
def test_a_bad_model_is_the_model_error_line_and_writes_nothing(tmp_path, kind, match):
    model = _bad_model(tmp_path, kind)
    code, printed, err = run_main("finetune", "--model", model, "--out", tmp_path / "r")
    assert code == 2 and printed == "" and err.count("\n") == 1, err
    assert err.startswith("jaxes: error: ") and match in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "flags, match",
    [
        ([], "--model: give a Hugging Face model directory"),
        (["--task", "gsm8k"], "--task: expected countdown, or jsonl:PATH (a file of"),
        (["--task", "jsonl:/nonexistent.jsonl"], "--task: cannot read /nonexistent.jsonl"),
        (["--reward", "rewards.py"], "--reward: expected FILE.py:NAME"),
        (["--reward", "/nonexistent.py:score"], "--reward: /nonexistent.py is not a Python"),
        (["--population", "3"], "population_size: antithetic pairs need an even population"),
        (["--learning-rate", "0"], "learning_rate: expected a finite number > 0"),
        (["--answer-tokens", "0"], "answer_tokens: expected an int >= 1, got 0"),
        (["--dtype", "float64"], "argument --dtype: invalid choice: 'float64'"),
        (["--devices", "2"], "devices: a reward in Python runs on one CPU device"),
        (["--chunk-size", "0"], "chunk_size: expected an int >= 1, got 0"),
        (["--chunk-size", "5"], "chunk_size: 5 does not divide the population of 32"),
        (["--resume"], "--resume needs --out RUN"),
    ],
)
def test_bad_settings_are_one_line_before_anything_compiles(tmp_path, flags, match):
    model = [] if not flags or flags == ["--resume"] else ["--model", QWEN]
    out = [] if flags == ["--resume"] else ["--out", tmp_path / "r"]
    code, _, err = run_main("finetune", *model, *flags, *out)
    assert code == 2 and match in err and err.count("\n") == 1, err
    assert not (tmp_path / "r").exists()


def test_resume_changes_only_generations_and_reads_only_finetune_runs(run, tmp_path):
    out = run["out"]
    before = (out / "config.json").read_text()
    code, _, err = run_main("finetune", "--out", out, "--resume", "--sigma", "0.1")
    assert code == 2 and "sigma=0.1 differs from the run's 0.05" in err
    assert "only --generations may change" in err and (out / "config.json").read_text() == before
    brax = tmp_path / "brax"
    brax.mkdir()
    (brax / "config.json").write_text(json.dumps({"env": "fast", "generations": 4}))
    for argv in (
        ["finetune", "--out", brax, "--resume"],
        ["export", brax, "--out", tmp_path / "model"],
    ):
        code, _, err = run_main(*argv)
        assert code == 2 and "is not a `jaxes finetune` run" in err, err
    assert not (tmp_path / "model").exists()
    code, _, err = run_main("eval", out)
    assert code == 2 and f"`jaxes export {out} --out DIR` writes its model" in err


def test_a_damaged_checkpoint_is_one_line_and_nothing_is_exported(run, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(run["out"], broken)
    for path in (broken / "checkpoints").rglob("*"):
        if path.is_file():
            path.write_bytes(b"\x00garbage")
    code, _, err = run_main("export", broken, "--out", tmp_path / "model")
    assert code == 2 and "can be read" in err and err.count("\n") == 1, err
    assert not (tmp_path / "model").exists()


def test_help_and_a_bad_model_through_the_real_command(tmp_path):
    code, printed, _ = run_main("finetune", "--help")
    assert code == 0 and all(w in printed for w in ("--task", "--rank", "jsonl:PATH", "--resume"))
    code, printed, _ = run_main("export", "--help")
    assert code == 0 and "run_dir" in printed and "--dtype" in printed
    proc = subprocess.run(
        [sys.executable, "-m", "jaxes", "finetune", "--model", "Qwen/Qwen2.5-0.5B"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "never downloads" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_stream_weights_and_chunk_size_are_settings_a_run_written_before_them_reads_as_off(
    run, tmp_path
):
    """--stream-weights builds the model that reads each layer's weights where it uses them
    (the memory plan's setting), --chunk-size the task that decodes that many members at once;
    a run whose config.json predates the flags still resumes and exports, as unstreamed and
    with every member at once."""
    settings, _ = finetune.read_run(str(run["out"]), "run_dir")
    assert settings["stream_weights"] is False and settings["chunk_size"] is None
    pretrained, lm, _ = finetune.build({**settings, "stream_weights": True, "chunk_size": 2})
    assert pretrained.model.stream_weights is True and lm.task.chunk_size == 2
    old = tmp_path / "old"
    shutil.copytree(run["out"], old)
    config = json.loads((old / "config.json").read_text())
    del config["stream_weights"], config["chunk_size"]
    (old / "config.json").write_text(json.dumps(config))
    assert finetune.read_run(str(old), "run_dir")[0] == settings
    code, _, err = run_main("export", old, "--out", tmp_path / "model")
    assert code == 0, err
