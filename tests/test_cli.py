"""The `jaxes` command: useful help, one-line errors, nothing overwritten."""

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import zlib

import pytest
from conftest import TINY_FLAGS
from helpers import number

from jaxes.app import cli, presets


def run_main(capsys, *argv):
    try:
        code = cli.main(list(argv))
    except SystemExit as stop:
        code = stop.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", ["train", "eval", "render", "envs"])
def test_every_command_has_useful_help(capsys, command):
    code, out, _ = run_main(capsys, command, "--help")
    assert code == 0
    expected = {
        "train": ["--population", "--seeds", "--timesteps", "hopper: population_size=32"],
        "eval": ["run_dir", "--episodes"],
        "render": ["replay.html"],
        "envs": ["environment"],
    }
    for word in expected[command]:
        assert word in out


def test_envs_lists_names_and_nothing_else():
    proc = subprocess.run([sys.executable, "-m", "jaxes", "envs"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert "inverted_pendulum" in proc.stdout.split() and "warp" not in proc.stdout + proc.stderr


def test_a_bad_run_prints_one_line_and_no_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "jaxes", "train", "--env", "cartpole", "--out", str(tmp_path / "r")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    # Both families are named: Brax's by name, gymnax's (CartPole-v1) through `jaxes envs`.
    assert proc.stderr.startswith("jaxes: error: env: no env 'cartpole'; Brax's")
    assert all(name in proc.stderr for name in ("'hopper'", "CartPole-v1", "jaxes envs"))
    assert not (tmp_path / "r").exists()


def command_without(block: tuple[str, ...], *args: str) -> subprocess.CompletedProcess:
    """``jaxes ARGS`` in a fresh process whose modules in ``block`` cannot be imported, as if
    their extra were not installed (as tests/test_install.py's ``command``)."""
    code = (
        "import sys\n"
        f"for name in {block!r}: sys.modules[name] = None\n"
        f"sys.argv = ['jaxes', *{list(args)!r}]\n"
        "from jaxes.app.cli import entry\n"
        "entry()\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


@pytest.mark.parametrize(
    "env, block",
    [
        ("nope", ()),
        ("nope", ("brax", "mujoco")),  # a name without '-' would be Brax's, whose extra is gone
        ("Pong-v5", ("gymnax",)),  # a name with '-' would be gymnax's
        ("nope", ("brax", "mujoco", "gymnax")),
        ("Pong-v5", ("brax", "mujoco", "gymnax")),
    ],
)
def test_an_unknown_env_is_named_first_whatever_is_installed(tmp_path, env, block):
    """Issue 63: without Brax, `jaxes train --env nope` said to install Brax."""
    out = tmp_path / "r"
    proc = command_without(block, "train", "--env", env, "--out", str(out))
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"jaxes: error: env: no env {env!r}; Brax's are")
    assert "jaxes envs" in proc.stderr and "pip install" not in proc.stderr
    assert not out.exists()


def test_the_env_names_known_without_their_extras_are_the_registries():
    """An env whose extra is missing is told from no env by ``presets.ENV_NAMES``: the names
    Brax's and gymnax's registries hold (both installed here)."""
    from jaxes.tasks.brax.envs import env_names as brax_names
    from jaxes.tasks.gymnax.envs import env_names as gymnax_names

    assert sorted(presets.ENV_NAMES["brax"]) == sorted(brax_names())
    assert sorted(presets.ENV_NAMES["gymnax"]) == sorted(gymnax_names())
    assert not any("-" in name for name in presets.ENV_NAMES["brax"])
    assert all("-" in name for name in presets.ENV_NAMES["gymnax"])


def test_the_help_says_envs_lists_both_families(capsys):
    """Issue 63: `jaxes --help` said `envs` lists Brax's environments; it lists gymnax's too."""
    code, out, _ = run_main(capsys, "--help")
    assert code == 0
    (line,) = [x for x in out.splitlines() if x.strip().startswith("envs ")]
    assert "Brax" in line and "gymnax" in line


def test_a_setting_the_strategy_does_not_take_is_one_line_naming_it(tmp_path):
    """Issue 60: NeuroEvoBench's SNES temperature asked of open_es, through the real command."""
    out = tmp_path / "r"
    proc = subprocess.run(
        [sys.executable, "-m", "jaxes", "train", "--strategy", "open_es", "--temperature", "30"]
        + ["--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr == (
        "jaxes: error: temperature: open_es has no temperature setting; strategies with one: "
        "['snes']\n"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    "flags, match",
    [
        (["--backend", "physx"], "backend: unknown 'physx'"),
        (["--strategy", "cma"], "strategy: unknown 'cma'"),
        (["--episode-length", "0"], "episode_length: expected an int >= 1, got 0"),
        (["--population", "7"], "population_size: antithetic pairs need an even population"),
        (["--sigma", "-1"], "sigma: expected a finite number > 0"),
        (["--population", "many"], "argument --population: invalid int value: 'many'"),
        (["--hidden-sizes", "0,3"], "expected positive ints"),
        (["--action-repeat", "0"], "action_repeat: expected an int >= 1, got 0"),
        (["--timesteps", "-1"], "timesteps: expected an int >= 1, got -1"),
        (["--target-return", "nan"], "target_return: expected a finite number"),
        (["--seeds", "3-1"], "argument --seeds: expected a range A-B with 0 <= A <= B"),
        (["--seeds", "0-2", "--seed", "1"], "--seed and --seeds: give one of them"),
        (["--l2-coeff", "-0.1"], "l2_coeff: expected a finite number >= 0"),
        (["--strategy", "ars", "--l2-coeff", "0.1"], "l2_coeff: ars has no l2_coeff setting"),
        (["--temperature", "30"], "temperature: open_es has no temperature setting"),
        (
            ["--strategy", "sep_cma_es", "--learning-rate-decay", "0.999"],
            "learning_rate_decay: sep_cma_es has no learning_rate_decay setting",
        ),
        (["--sigma-limit", "0.01"], "sigma_limit: the floor of a decaying sigma"),
        (["--strategy", "sep_cma_es", "--elite-ratio", "0"], "elite_ratio: expected a finite"),
        (["--fitness-shaping", "rank"], "fitness_shaping: unknown 'rank'"),
        (["--noise", "uniform"], "noise: unknown 'uniform'"),
        (["--env", "swimmer", "--backend", "spring"], "swimmer runs only on ['generalized']"),
        (["--config", "/nonexistent.toml"], "--config: cannot read /nonexistent.toml"),
    ],
)
def test_bad_settings(capsys, tmp_path, flags, match):
    code, out, err = run_main(capsys, "train", *flags, "--out", str(tmp_path / "r"))
    assert code == 2 and match in err and err.count("\n") == 1
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "text, match",
    [
        ("sigmaa = 0.1\n", "unknown settings ['sigmaa']"),
        ('population_size = "many"\n', "population_size: expected an int >= 2, got 'many'"),
        ("sigma = \n", "not valid TOML"),
    ],
)
def test_bad_toml_names_the_file_and_the_key(capsys, tmp_path, text, match):
    path = tmp_path / "settings.toml"
    path.write_text(text)
    code, _, err = run_main(capsys, "train", "--config", str(path), "--out", str(tmp_path / "r"))
    assert code == 2 and f"{path}: " in err and match in err and err.count("\n") == 1
    assert not (tmp_path / "r").exists()


def test_preset_then_toml_then_flags(capsys, tmp_path):
    path = tmp_path / "settings.toml"
    path.write_text('env = "fast"\ngenerations = 3\npopulation_size = 8\neval_every = 1\n')
    code, _, err = run_main(
        capsys, "train", "--config", str(path), "--generations", "2", "--checkpoint-every", "1",
        "--out", str(tmp_path / "r"),
    )  # fmt: skip
    assert code == 0, err
    saved = json.loads((tmp_path / "r" / "config.json").read_text())
    assert (saved["env"], saved["population_size"], saved["generations"]) == ("fast", 8, 2)
    assert saved["episode_length"] == presets.preset("fast")["episode_length"]


def test_existing_run_is_never_overwritten(capsys, tiny_run):
    before = {p: os.path.getmtime(os.path.join(tiny_run, p)) for p in os.listdir(tiny_run)}
    code, _, err = run_main(capsys, "train", *TINY_FLAGS, "--out", str(tiny_run))
    assert code == 2 and "already exists and is not empty; resume it (--resume)" in err
    assert before == {p: os.path.getmtime(os.path.join(tiny_run, p)) for p in os.listdir(tiny_run)}


def test_unwritable_output_dir(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code, _, err = run_main(capsys, "train", *TINY_FLAGS, "--out", str(blocker / "run"))
    assert code == 2 and "out: cannot write to" in err and blocker.read_text() == "not a directory"


def test_resume_problems(capsys, tmp_path, tiny_run):
    code, _, err = run_main(capsys, "train", "--resume")
    assert code == 2 and "--resume needs --out" in err
    code, _, err = run_main(capsys, "train", "--resume", "--out", str(tmp_path / "none"))
    assert code == 2 and "holds no run (config.json is missing)" in err
    no_ckpt = tmp_path / "no_ckpt"
    no_ckpt.mkdir()
    shutil.copy(tiny_run / "config.json", no_ckpt / "config.json")
    # A run stopped before its first checkpoint resumes from generation 0.
    code, out, err = run_main(
        capsys, "train", "--resume", "--out", str(no_ckpt), "--generations", "5"
    )
    assert code == 0, err
    assert "no checkpoint yet: starting again from generation 0" in out
    assert (no_ckpt / "checkpoints" / "5").is_dir()
    code, _, err = run_main(capsys, "train", "--resume", "--out", str(tiny_run), "--sigma", "0.2")
    assert code == 2 and "sigma=0.2 differs from the run's 0.05" in err


def test_corrupt_checkpoint_is_a_clear_error(capsys, tmp_path, tiny_run):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_run, broken)
    for root, _, files in os.walk(broken / "checkpoints"):
        for name in files:
            with open(os.path.join(root, name), "wb") as f:
                f.write(b"\x00garbage")
    for argv in (["train", "--resume", "--out", str(broken)], ["eval", str(broken)]):
        code, _, err = run_main(capsys, *argv)
        assert code == 2 and "can be read" in err and err.count("\n") == 1


def test_eval_and_render(capsys, tmp_path, tiny_run):
    run_dir = tmp_path / "copy"
    shutil.copytree(tiny_run, run_dir)
    code, out, _ = run_main(capsys, "eval", str(run_dir), "--episodes", "3")
    assert code == 0 and "generation 20, return" in out and "over 3 episodes" in out
    assert 0 < number("return", out) <= 100, out  # 1 per step, 100-step episodes
    code, out, _ = run_main(capsys, "render", str(run_dir))
    assert code == 0 and "wrote" in out
    page = (run_dir / "replay.html").read_text()
    assert "<html" in page and "Brax visualizer" in page and len(page) > 10_000
    # The replay holds the episode it reports: its start and one frame per step played, and
    # the pendulum's return is the steps it stayed up.
    steps, ret = number(r"generation 20,", out), number(r"steps, return", out)
    assert 0 < steps <= 100 and ret == steps, out
    assert len(replay_frames(page)) == steps + 1, out
    code, _, err = run_main(capsys, "eval", str(run_dir), "--episodes", "0")
    assert code == 2 and "--episodes: expected an int >= 1" in err


def replay_frames(page):
    """The frames (body positions per step) of a Brax replay page: its system JSON, which the
    page embeds zlib-compressed and base64-encoded."""
    encoded = re.search(r'var system = "([A-Za-z0-9+/=]+)"', page)
    assert encoded, "no embedded system in the page"
    return json.loads(zlib.decompress(base64.b64decode(encoded[1])))["states"]["x"]


def test_seeds_from_the_cli_resume_and_point_eval_at_one_seed(capsys, tmp_path):
    out = str(tmp_path / "seeds")
    flags = ["--env", "fast", "--population", "8", "--eval-every", "1", "--checkpoint-every", "1"]
    code, stdout, err = run_main(
        capsys, "train", *flags, "--seeds", "0-1", "--generations", "2", "--out", out
    )
    assert code == 0, err
    assert "median noise-free eval return" in stdout and "seed 1:" in stdout
    code, stdout, err = run_main(capsys, "train", "--resume", "--out", out, "--generations", "3")
    assert code == 0, err
    for seed in (0, 1):
        lines = (tmp_path / "seeds" / f"seed-{seed}" / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(x)["generation"] for x in lines] == [1, 2, 3]
    summary = json.loads((tmp_path / "seeds" / "summary.json").read_text())
    assert [r["generations"] for r in summary["runs"]] == [3, 3]
    code, _, err = run_main(capsys, "train", "--resume", "--out", out, "--seeds", "0-2")
    assert code == 2 and "holds the runs of seeds [0, 1], not [0, 1, 2]" in err
    code, _, err = run_main(capsys, "eval", out)
    assert code == 2 and f"name one of them, e.g. {out}/seed-0" in err
