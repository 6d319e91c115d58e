"""The MinAtar sweep's wiring (benchmarks/minatar_sweep.py over benchmarks/minatar.py): a
setting's flags reach `jaxes train`, bad `--set` values are refused, the scripts' examples
hold. Nothing is trained here."""

import doctest
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the scripts import `_common` as a sibling

import minatar  # noqa: E402
import minatar_sweep  # noqa: E402


def test_a_settings_flags_reach_the_train_command(tmp_path):
    flags = {**minatar_sweep.ROW, **minatar_sweep.GRID["conv-neuroevobench"]}
    args = minatar.parse_args(
        ["--games", "Breakout", "--runs", str(tmp_path)]
        + [f"--set={flag}={value}" for flag, value in flags.items()]
    )
    cmd = minatar.train_command(args, "Breakout", tmp_path / "run")
    for flag, value in flags.items():
        at = cmd.index(f"--{flag}")
        assert cmd[at + 1] == value
    assert cmd[cmd.index("--env") + 1] == "Breakout-MinAtar"


@pytest.mark.parametrize("bad", ["noise", "--noise=lowrank", "=1"])
def test_a_set_value_without_flag_and_value_is_refused(bad, capsys):
    with pytest.raises(SystemExit):
        minatar.parse_args(["--set", bad])
    assert "FLAG=VALUE" in capsys.readouterr().err


def test_an_unknown_sweep_setting_is_refused(capsys):
    with pytest.raises(SystemExit):
        minatar_sweep.parse_args(["--settings", "row,nonsense"])
    assert "nonsense" in capsys.readouterr().err


@pytest.mark.parametrize("module", [minatar, minatar_sweep], ids=lambda m: m.__name__)
def test_the_scripts_examples_hold(module):
    results = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert results.attempted > 0 and results.failed == 0
