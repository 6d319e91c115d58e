"""The MinAtar sweep's wiring (benchmarks/minatar_sweep.py over benchmarks/minatar.py): a
setting's flags reach `jaxes train`, bad `--set` values are refused, the scripts' examples
hold, the table reads its checkpoints and sittings merge. Nothing is trained here."""

import doctest
import json
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


def _seed(seed: int, curve: list[list]) -> dict:
    """A seed summary as `minatar.seed_summary` writes it, from a curve of [simulated steps,
    alive steps, wall seconds, eval return] points."""
    last = curve[-1]
    return {
        "seed": seed,
        "generations": len(curve),
        "env_steps": last[0],
        "alive_steps": last[1],
        "final_eval_return": last[3],
        "best_eval_return": max(p[3] for p in curve),
        "ppo_return_env_steps": None,
        "ppo_return_alive_steps": minatar.first_at(curve, 28.0, 1),
        "ppo_return_wall_s": None,
        "curve_columns": ["total_env_steps", "total_alive_steps", "wall_time_s", "eval_return"],
        "curve": curve,
    }


def _sitting(game: str, seeds: list[dict]) -> dict:
    summary = minatar.game_summary(game, seeds, 2700.0, 100_000_000)
    return summary | {"sitting": {"wall_s": 2700.0, "returncode": 130}}


def test_the_table_reads_each_checkpoint_and_the_previous_tables_wall_clock(tmp_path):
    # Breakout's previous table: 3.25 at 25 minutes; PPO's return 28. Three seeds with their
    # own curves, none of them the median first, and the last never reaches PPO's return.
    fast = [[5e6, 4e6, 600.0, 3.0], [12e6, 9e6, 1200.0, 6.0], [20e6, 14e6, 1800.0, 29.0]]
    slow = [[5e6, 4e6, 600.0, 2.0], [14e6, 11e6, 1400.0, 4.0], [40e6, 30e6, 2400.0, 31.0]]
    never = [[5e6, 4e6, 600.0, 1.0], [16e6, 12e6, 1600.0, 5.0], [30e6, 22e6, 2000.0, 9.0]]
    game = _sitting("Breakout", [_seed(0, fast), _seed(1, slow), _seed(2, never)])
    # At 10M alive steps the seeds read 6, 2 and 1; by 1500 s, 6, 4 and 1.
    assert game["eval_at_alive_steps"] == {"10000000": 2.0, "100000000": None}
    assert game["eval_at_previous_minutes"] == 4.0
    assert game["above_previous_at_equal_wall"] is True
    # 14M, 30M and +inf alive steps to PPO's return: the median is the slow seed's, not the
    # median of the two that got there (22M).
    assert game["median_alive_steps_to_ppo"] == 30e6
    assert game["target_steps_within_10x_ppo"] is True
    assert game["final_eval_return"] == {"median": 29.0, "min": 9.0, "max": 31.0}
    # A seed that stops short of 10M alive steps (`short`) leaves the median at 10M
    # unreported, and two seeds of three that never reach PPO's return leave the median
    # steps to it +inf: not reached, and not the one seed that did.
    short = [[5e6, 4e6, 600.0, 1.0], [9e6, 8e6, 1600.0, 3.0]]
    shorter = _sitting("Asterix", [_seed(0, fast), _seed(1, never), _seed(2, short)])
    assert shorter["eval_at_alive_steps"]["10000000"] is None
    assert shorter["median_alive_steps_to_ppo"] is None
    assert shorter["target_steps_within_10x_ppo"] is None  # stopped short of 100M: cannot tell
    assert minatar.eval_at(short, 1500.0, 2) == 1.0
    assert minatar.eval_at(short, 10e6, 1) is None

    # Two sittings' files become one table, in the games' order, with both verdicts.
    files = []
    for name, g in (("b.json", game), ("a.json", shorter)):
        path = tmp_path / name
        path.write_text(json.dumps({"machine": {"git": "x"}, "settings": {}, "games": [g]}))
        files.append(str(path))
    out = tmp_path / "merged.json"
    minatar.run_merge(minatar.parse_args(["--merge", *files, "--out", str(out)]), [])
    merged = json.loads(out.read_text())
    assert [g["game"] for g in merged["games"]] == ["Asterix", "Breakout"]
    assert merged["machine"]["merged_from"] == files

    # A later sitting of a game replaces the earlier one, which is kept beside the table.
    again = _sitting("Breakout", [_seed(0, short), _seed(1, short), _seed(2, short)])
    later = tmp_path / "c.json"
    later.write_text(json.dumps({"machine": {"git": "y"}, "settings": {}, "games": [again]}))
    args = ["--merge", *files, str(later), "--out", str(out)]
    minatar.run_merge(minatar.parse_args(args), [])
    merged = json.loads(out.read_text())
    assert [g["game"] for g in merged["games"]] == ["Asterix", "Breakout"]
    assert merged["games"][1]["final_eval_return"] == again["final_eval_return"]
    assert again["final_eval_return"] != game["final_eval_return"]
    assert [(r["game"], r["by"]) for r in merged["replaced"]] == [("Breakout", str(later))]


def test_merge_names_an_unreadable_file(tmp_path):
    damaged = tmp_path / "damaged.json"
    damaged.write_text("{not json")
    for path in (damaged, tmp_path / "missing.json"):
        args = minatar.parse_args(["--merge", str(path), "--out", str(tmp_path / "o.json")])
        with pytest.raises(SystemExit, match=f"--merge: cannot read {path}"):
            minatar.run_merge(args, [])
