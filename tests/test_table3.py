"""benchmarks/table3.py: its helpers (crossings, medians, bounds) and one real quick sweep;
benchmarks/table3_sweep.py: its grid and its summaries."""

import doctest
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the scripts import `_common` as a sibling

import table3  # noqa: E402
import table3_sweep  # noqa: E402

from jaxes.app import parser as cli_parser  # noqa: E402
from jaxes.app import presets  # noqa: E402
from jaxes.app.config import TrainConfig  # noqa: E402

CURVE = [(100, 5.0), (200, 10.0), (300, 7.0), (400, 12.0)]


def test_the_table_names_each_envs_setting_command_commit_and_machine():
    config = {"strategy": "open_es", "population_size": 8, "sigma": 0.1, "learning_rate": 0.03}
    config |= {"l2_coeff": 0.0, "policy": "mlp", "hidden_sizes": [32, 32], "eval_every": 2}
    machine = {"git": "abc1234", "cpu_model": "AMD EPYC", "cpu_cores": 2}
    cmd = ["-m", "jaxes", "train", "--env", "hopper", "--preset", "table3"]
    record = {"env": "hopper", "settings": {"jaxes_config": config | {"backend": "spring"}}}
    record["sittings"] = [{"command": cmd, "machine": machine}] * 2
    row = table3.settings_markdown([record]).splitlines()[-1]
    assert row == (
        "| hopper | open_es P=8, sigma 0.1, lr 0.03, L2 0, mlp 32,32, eval every 2, spring | "
        "`jaxes train --env hopper --preset table3` | abc1234 | AMD EPYC, 2 cores |"
    )


def test_a_re_sit_reuses_only_a_finished_brax_es_run_of_the_same_spec(tmp_path):
    config = {"backend": "spring", "episode_length": 1000, "population_size": 32}
    config |= {"policy": "linear", "sigma": 0.02, "learning_rate": 0.02, "l2_coeff": 0.005}
    spec = table3.brax_spec("hopper", config, 1000, "preset", tmp_path / "a.jsonl")
    done = {"status": "done", "spec": spec, "bound": "timesteps", "curve": [[10, 1.0]]}
    (tmp_path / "hopper.json").write_text(json.dumps({"brax_es": done}))
    found = table3.finished_brax_runs({}, tmp_path, "hopper")
    assert [old for _, old in found] == [done]
    elsewhere = table3.brax_spec("hopper", config, 1000, "preset", tmp_path / "b.jsonl")
    assert table3.same_brax_run(found[0][1]["spec"], elsewhere)
    bigger = table3.brax_spec("hopper", config | {"population_size": 64}, 1000, "preset", "b")
    assert not table3.same_brax_run(found[0][1]["spec"], bigger)
    failed = {"brax_es": {**done, "status": "failed"}}
    assert table3.finished_brax_runs(failed, None, "hopper") == []


@pytest.mark.parametrize(
    ("threshold", "expected"),
    [(-1.0, 100), (10.0, 200), (9.9, 200), (11.0, 400), (12.5, None)],
)
def test_first_crossing_is_the_first_evaluation_at_or_above(threshold, expected):
    assert table3.first_crossing(CURVE, threshold) == expected


def test_first_crossing_of_no_evaluations_is_none():
    assert table3.first_crossing([], 0.0) is None


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([100, None, 300], 300),  # one miss of three: the median is still reached
        ([100, None, None], None),  # two misses of three: not reached
        ([None, None, None], None),
        ([300, 100, 200], 200),
        ([100, 200], 150),
        ([100, None], None),  # half of an even count missed: the median is infinite
        ([], None),
    ],
)
def test_median_counts_a_miss_as_infinite(values, expected):
    assert table3.median_steps(values) == expected


def test_seed_stop():
    assert table3.seed_stop(5_000, 1_000, None) == "timesteps"
    assert table3.seed_stop(500, 1_000, 400) == "scores reached"
    assert table3.seed_stop(500, 1_000, None) is None


def bound(stops, wall_used=10.0, returncode=0, stopped_for_wall=False):
    return table3.bound_applied(stops, wall_used, 900.0, returncode, stopped_for_wall)


def test_which_bound_applied():
    assert bound(["timesteps", "timesteps"]) == "timesteps"
    assert bound(["scores reached", "scores reached"]) == "scores reached"
    assert bound(["scores reached", "timesteps"]) == "timesteps"
    assert bound([None, "timesteps"], wall_used=900.5, returncode=130, stopped_for_wall=True) == (
        "wall clock"
    )
    # Too few seconds left for another start-up and compile counts as the wall clock.
    assert bound([None], wall_used=900.0 - table3.MIN_SITTING_S / 2, returncode=None) == (
        "wall clock"
    )
    assert bound([None, None], returncode=0) == "generations"
    assert bound([None], returncode=1) is None  # a failed sitting: not finished
    assert bound([None], returncode=None) is None


def test_within_paper():
    assert table3.within_paper(100, 200.0, []) is True
    assert table3.within_paper(300, 200.0, [400]) is False
    assert table3.within_paper(None, 200.0, [250, 300]) is False  # had the steps, missed
    assert table3.within_paper(None, 200.0, [150, 300]) is None  # one stopped short


@pytest.mark.parametrize(
    ("text", "seeds"), [("0-2", [0, 1, 2]), ("0,3,5", [0, 3, 5]), ("4", [4]), ("0-1,7", [0, 1, 7])]
)
def test_parse_seeds(text, seeds):
    assert table3.parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["", "a", "2-1", "0,0", "1-"])
def test_parse_seeds_rejects(text):
    with pytest.raises(ValueError, match="seeds"):
        table3.parse_seeds(text)


def test_alive_steps_are_summed_over_every_generation():
    lines = [
        {"generation": 1, "alive_steps": 10, "total_env_steps": 50},
        {"generation": 2, "alive_steps": 20, "total_env_steps": 100, "eval_return": 3.0},
        {"generation": 3, "alive_steps": 30, "total_env_steps": 150, "eval_return": None},
        {"generation": 4, "alive_steps": 40, "total_env_steps": 200, "eval_return": 4.0},
    ]
    totals = table3.add_alive_totals(lines)
    assert [x["total_alive_steps"] for x in totals] == [10, 30, 60, 100]
    assert table3.eval_curve(totals) == [(100, 3.0), (200, 4.0)]
    assert table3.eval_curve(totals, "total_alive_steps") == [(30, 3.0), (100, 4.0)]


def test_compare_at_the_largest_steps_both_reached():
    jaxes = [[(100, 1.0), (200, 5.0), (300, 9.0)], [(100, 2.0), (250, 4.0)]]
    brax = [(0, 0.0), (150, 3.0), (280, 6.0)]
    result = table3.compare_at_equal_steps(jaxes, brax)
    assert result["env_steps"] == 250
    assert result["jaxes_per_seed_return"] == [5.0, 4.0]
    assert result["jaxes_median_return"] == 4.5
    assert result["brax_es_return"] == 3.0
    assert result["jaxes_beats_brax_es"] is True
    assert table3.compare_at_equal_steps(jaxes, []) is None


def test_brax_es_preset_variant_converts_the_l2_term():
    config = {"sigma": 0.02, "learning_rate": 0.02, "l2_coeff": 0.005}
    settings = table3.brax_es_settings("preset", config)
    assert settings["perturbation_std"] == 0.02
    assert settings["learning_rate"] == 0.02
    assert settings["l2coeff"] == pytest.approx(2 * 0.02 * 0.005)
    assert table3.brax_es_settings("tuned", config)["perturbation_std"] == 0.05


def test_docs_section_is_replaced_between_the_markers(tmp_path):
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\nkept\n")
    section = f"{table3.MARK_START}\nfirst\n{table3.MARK_END}"
    table3.write_docs_section(docs, section)
    assert docs.read_text().endswith(section + "\n")
    table3.write_docs_section(docs, section.replace("first", "second"))
    text = docs.read_text()
    assert "kept" in text and "second" in text and "first" not in text
    assert text.count(table3.MARK_START) == 1


def test_quick_sweep(tmp_path):
    """The real thing, small: `jaxes train --seeds 0-1 --timesteps 50000` on
    inverted_pendulum at the cadence of the rule, read back into a result JSON and a table
    that counts the evaluations' env steps the runs wrote."""
    runs = tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "table3.py"), "--quick"]
        + ["--results", str(tmp_path), "--runs", str(runs)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "| inverted_pendulum |" in proc.stdout
    record = json.loads((tmp_path / "inverted_pendulum.json").read_text())
    budget = table3.QUICK["timesteps"]
    assert record["status"] == "done"
    assert record["settings"]["seeds"] == [0, 1]
    assert record["settings"]["timesteps_budget"] == budget
    assert record["bound"]["applied"] == "timesteps"  # no stop at the final score
    assert record["wall_s_used"] > 0 and len(record["sittings"]) == 1
    assert record["sittings"][0]["returncode"] == 0
    assert "brax_es" not in record  # quick mode runs no Brax ES
    assert [s["seed"] for s in record["seeds"]] == [0, 1]
    thresholds = record["paper"]["thresholds"]
    for seed in record["seeds"]:
        assert (runs / "inverted_pendulum" / f"seed-{seed['seed']}" / "metrics.jsonl").is_file()
        crossings = seed["threshold_env_steps"]
        assert len(crossings) == 4
        assert all(x is None or (isinstance(x, int) and x > 0) for x in crossings)
        assert seed["curve"], "no evaluation recorded"
        # Read again from metrics.jsonl here, not with the functions that computed them.
        metrics = runs / "inverted_pendulum" / f"seed-{seed['seed']}" / "metrics.jsonl"
        config = json.loads((metrics.parent / "config.json").read_text())
        assert config["eval_every"] == table3.env_eval_every("inverted_pendulum") == 9
        evals = [json.loads(line) for line in metrics.read_text().splitlines()]
        evals = [x for x in evals if x.get("eval_return") is not None]
        assert [p[3:] for p in seed["curve"]] == [
            [x["eval_env_steps"], x["eval_alive_steps"]] for x in evals
        ]
        assert 0 < evals[0]["eval_env_steps"] <= 8 * 1000  # one evaluation of 8 episodes
        for threshold, crossing in zip(thresholds, crossings, strict=True):
            hits = [x["total_env_steps"] for x in evals if x["eval_return"] >= threshold]
            assert crossing == (hits[0] if hits else None)  # training's count, as before
        counted = [x["total_env_steps"] + x["eval_env_steps"] for x in evals
                   if x["eval_return"] >= thresholds[0]]  # fmt: skip
        measured = table3.seed_measures(seed, thresholds, config, "inverted_pendulum")
        assert measured["kind"] == "counted"
        assert measured["crossings"]["first"]["low"][0] == (counted[0] if counted else None)
        # The run stops after the generation that reaches the budget (or at the last score).
        assert seed["max_generation_env_steps"] > 0
        assert seed["env_steps_used"] <= budget + seed["max_generation_env_steps"]
        if seed["stopped"] == "timesteps":
            assert seed["env_steps_used"] >= budget
        assert 0 < seed["alive_steps_used"] <= seed["env_steps_used"]
    # It learns: a seed reaches TRPO's 25 % score (measured at eval every 2: seed 0 at 17,200
    # env steps, seed 1 not by 50,000; AMD EPYC).
    assert any(seed["threshold_env_steps"][0] is not None for seed in record["seeds"])
    for i, median in enumerate(record["median"]["threshold_env_steps"]):
        assert median == table3.median_steps([s["threshold_env_steps"][i] for s in record["seeds"]])
    assert record["measures"]["kind"] == "counted" and record["measures"]["eval_share"][0] > 0
    # The report's plot draws from the same record.
    table3.plot([record], tmp_path / "table3.png")
    assert (tmp_path / "table3.png").stat().st_size > 10_000


@pytest.mark.parametrize("env", table3.ENVS)
def test_every_sweep_setting_is_a_valid_config_that_changes_one_thing(env):
    """Each setting's flags, parsed by `jaxes train`'s own parser, give a valid config that
    differs from the env's `table3` setting where its flags say, and only there."""
    base = TrainConfig.make(env=env, preset="table3").to_dict()
    assert env in presets.NAMED["table3"]
    for name, flags in table3_sweep.grid(env).items():
        cmd = table3_sweep.command(env, flags, "0-2", 1000, Path("/tmp/never-made"))
        args = cli_parser.parser().parse_args(cmd[3:])
        given = {f: getattr(args, f) for _, f, _, _ in cli_parser.TRAIN_FLAGS}
        config = TrainConfig.make(**{k: v for k, v in given.items() if v is not None}).to_dict()
        changed = {k for k in base if config[k] != base[k]}
        changed -= {"timesteps", "target_return", "generations", "checkpoint_every"}
        fields = {f for flag, f, _, _ in cli_parser.TRAIN_FLAGS if flag[2:] in flags}
        # Something the flags set changed (a flag may repeat a value, as --hidden-sizes 32,32
        # does), nothing else did, and only the "table3" setting has no flags.
        assert changed <= fields and bool(changed) == (name != "table3"), (name, changed)
    assert config["target_return"] == table3.PAPER[env]["thresholds"][1]
    assert config["timesteps"] == 1000 and args.seeds == [0, 1, 2]
    # Every name can be asked for, all together, by --settings (a comma-separated list).
    names = list(table3_sweep.grid(env))
    swept = table3_sweep.parse_args(["--envs", env, "--settings", ",".join(names)])
    assert swept.names == names


def test_a_sweep_round_is_its_names_over_the_row_they_were_laid_over(monkeypatch):
    row = {"population_size": 16}
    monkeypatch.setitem(presets.NAMED["table3"], "hopper", row)
    assert table3_sweep.current_row("hopper") == row
    assert table3_sweep.row_slug(row) != table3_sweep.row_slug({})
    assert table3_sweep.grid("hopper")["population/2"] == {"population": "8"}


def test_sweep_summary_counts_a_missing_seed_as_infinite_and_judges_both_counts():
    lines = [
        {"generation": 1, "env_steps": 100, "alive_steps": 40, "total_env_steps": 100},
        {"generation": 2, "env_steps": 100, "alive_steps": 60, "total_env_steps": 200,
         "eval_return": 5.0},
        {"generation": 3, "env_steps": 100, "alive_steps": 80, "total_env_steps": 300,
         "eval_return": 12.0},
    ]  # fmt: skip
    seed = table3_sweep.seed_result(lines, [4.0, 10.0])
    assert seed["threshold_env_steps"] == [200, 300]
    assert seed["threshold_alive_steps"] == [100, 180]  # the running sum of alive_steps
    assert (seed["best_eval_return"], seed["final_eval_return"]) == (12.0, 12.0)
    assert (seed["env_steps_used"], seed["alive_steps_used"]) == (300, 180)
    missed = table3_sweep.seed_result(lines[:2], [4.0, 10.0])
    assert missed["threshold_env_steps"] == [200, None]
    out = table3_sweep.summary([seed, missed, missed], [250, 250])
    # Two of three seeds missed 50 %, and they stopped short of the paper's steps: unknown.
    assert out["median_env_steps"] == [200, None] and out["within_paper"] == [True, None]
    assert out["median_best_eval_return"] == 5.0


def test_the_sweep_report_prints_each_round_and_its_notes_and_runs_nothing(tmp_path, capsys):
    result = {"median_env_steps": [10, None], "median_alive_steps": [5, None]}
    result |= {"within_paper": [True, False], "within_paper_alive": [True, None]}
    result |= {"median_best_eval_return": 7.0, "sitting": {"wall_s": 60.0}}
    settings = [
        {"name": "table3", "row": {}, **result},
        {"name": "sigma*2", "row": {"population_size": 16}, "note": "stopped by hand", **result},
    ]
    record = {"env": "hopper", "seeds": [0, 1, 2], "paper_es_timesteps": [1.0, 2.0]}
    (tmp_path / "hopper.json").write_text(json.dumps(record | {"settings": settings}))
    args = table3_sweep.parse_args(["--envs", "hopper,swimmer", "--report"])
    args.results = tmp_path
    table3_sweep.run(args, [])
    out = capsys.readouterr().out
    assert "| preset | table3 | 10 / - | 5 / - | 7.0 | yes / no | yes / ? | 1.0 |" in out
    assert "| population_size=16 | sigma*2 (note) |" in out
    assert "(note) sigma*2 over population_size=16: stopped by hand" in out
    assert "swimmer" not in out and sorted(p.name for p in tmp_path.iterdir()) == ["hopper.json"]


@pytest.mark.parametrize(
    ("returncode", "stopped_for_wall", "interrupted", "recorded"),
    [(0, False, False, True), (130, True, False, True), (130, False, False, False),
     (None, False, True, False), (1, False, False, False)],
)  # fmt: skip
def test_a_sweep_setting_cut_short_by_hand_or_a_failure_is_not_recorded(
    tmp_path, monkeypatch, returncode, stopped_for_wall, interrupted, recorded
):
    sitting = {"returncode": returncode, "stopped_for_wall": stopped_for_wall}
    sitting |= {"interrupted": interrupted, "wall_s": 1.0}
    monkeypatch.setattr(table3_sweep, "run_sitting", lambda *a: dict(sitting))
    args = table3_sweep.parse_args(["--envs", "hopper", "--settings", "table3"])
    args.results, args.runs = tmp_path, tmp_path / "runs"
    if recorded:
        table3_sweep.run(args, [table3_sweep.__file__])
        saved = json.loads((tmp_path / "hopper.json").read_text())
        assert [s["name"] for s in saved["settings"]] == ["table3"]
    else:
        with pytest.raises(SystemExit, match="hopper table3: jaxes train exited with"):
            table3_sweep.run(args, [table3_sweep.__file__])
        assert not (tmp_path / "hopper.json").exists()


def test_a_rerun_skips_a_setting_recorded_over_the_current_row_and_reruns_it_over_a_new_one(
    tmp_path, monkeypatch, capsys
):
    """Moving a winner into NAMED starts a new round: the same names run again over the new
    row, while a rerun over an unchanged row skips what is recorded."""
    ran = []

    def fake_setting(env, name, flags, args, runs):
        ran.append((name, table3_sweep.row_slug(table3_sweep.current_row(env))))
        out = {"name": name, "row": table3_sweep.current_row(env), "sitting": {"wall_s": 1.0}}
        out |= {"median_env_steps": [1, 2], "median_alive_steps": [1, 2]}
        out |= {"within_paper": [True, True], "within_paper_alive": [True, True]}
        return out | {"median_best_eval_return": 1.0}

    monkeypatch.setattr(table3_sweep, "run_setting", fake_setting)
    args = table3_sweep.parse_args(["--envs", "hopper", "--settings", "table3,sigma*2"])
    args.results, args.runs = tmp_path, tmp_path / "runs"
    monkeypatch.setitem(presets.NAMED["table3"], "hopper", {})
    table3_sweep.run(args, [])
    table3_sweep.run(args, [])  # the same row: both recorded, nothing runs
    monkeypatch.setitem(presets.NAMED["table3"], "hopper", {"population_size": 16})
    table3_sweep.run(args, [])
    new = table3_sweep.row_slug({"population_size": 16})
    assert ran == [("table3", "preset"), ("sigma*2", "preset"), ("table3", new), ("sigma*2", new)]
    assert capsys.readouterr().out.count("recorded, skipped") == 2
    saved = json.loads((tmp_path / "hopper.json").read_text())
    assert [(s["name"], s["row"]) for s in saved["settings"]] == [
        ("table3", {}), ("sigma*2", {}), ("table3", {"population_size": 16}),
        ("sigma*2", {"population_size": 16}),
    ]  # fmt: skip


def test_the_sweep_report_pools_a_config_recorded_on_other_seeds(tmp_path, capsys):
    """`--report --pool DIR`: a config recorded in both folders is judged on all its seeds
    (here one of six reaches 50 %: not reached, though the first three alone would pass)."""

    def seed(n, crossings):
        out = {"seed": n, "threshold_env_steps": crossings, "threshold_alive_steps": crossings}
        return out | {"best_eval_return": 1.0, "env_steps_used": 100, "alive_steps_used": 100}

    def record(name, row, seeds):
        setting = {"name": name, "row": row, "config": {"population_size": 16}, "seeds": seeds}
        setting |= table3_sweep.summary(seeds, [50, 50]) | {"sitting": {"wall_s": 6.0}}
        return {"env": "hopper", "seeds": [s["seed"] for s in seeds],
                "paper_es_timesteps": [50, 50], "settings": [setting]}  # fmt: skip

    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    first = [seed(0, [10, 20]), seed(1, [10, 20]), seed(2, [10, None])]
    held_out = [seed(n, [10, None]) for n in (3, 4, 5)]
    (tmp_path / "a" / "hopper.json").write_text(json.dumps(record("population/2", {}, first)))
    again = record("table3", {"population_size": 16}, held_out)
    (tmp_path / "b" / "hopper.json").write_text(json.dumps(again))
    args = table3_sweep.parse_args(["--envs", "hopper", "--report", "--pool", str(tmp_path / "b")])
    args.results = tmp_path / "a"
    table3_sweep.run(args, [])
    out = capsys.readouterr().out
    assert "| preset | population/2 | 10 / 20 |" in out  # the first record alone: within
    name = "population/2 over preset = table3 over population_size=16"
    assert f"| {name} | 0,1,2,3,4,5 | 10 / - | 10 / - | 1.0 | yes / no | yes / no |" in out
    with pytest.raises(SystemExit):
        table3_sweep.parse_args(["--pool", str(tmp_path)])  # only with --report


@pytest.mark.parametrize("module", [table3, table3_sweep], ids=lambda m: m.__name__)
def test_the_benchmark_scripts_examples_hold(module):
    """`make test` collects doctests under src/ only; these scripts' examples run here (one of
    them had gone stale when hopper's table3 row moved)."""
    results = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert results.attempted > 0 and results.failed == 0


# --------------------------------------------------------------------------------------------
# Issue 60: every env step counted, first and sustained crossings, the cadence, the seeds.
# --------------------------------------------------------------------------------------------


def steps(values, start=1000, step=1000):
    """A hand-made curve: evaluation i at start + i * step env steps."""
    return [(start + i * step, float(v)) for i, v in enumerate(values)]


@pytest.mark.parametrize(
    ("values", "first", "sustained"),
    [
        # One noisy spike: the first crossing counts it, the sustained one waits for the mean
        # of three to hold (evaluations 4, 5, 6: counted at the last, 7000).
        ([0, 10, 0, 0, 6, 6, 6], 2000, 7000),
        # Reached and kept from the start: sustained at the third evaluation.
        ([5, 5, 5, 5], 1000, 3000),
        # A mean that held and then fell back: the later run of windows is the one that counts.
        ([6, 6, 6, 0, 0, 0, 6, 6, 6], 1000, 9000),
        # Fell back at the end: not sustained.
        ([6, 6, 6, 6, 0, 0], 1000, None),
        # Fewer evaluations than a window: never judged sustained.
        ([9, 9], 1000, None),
        # A mean at the score with members below it: sustained at the last of its window,
        # here the first crossing itself ...
        ([0, 4, 12, 4, 5, 6], 3000, 3000),
        # ... and a spike that lifts one window, then a window below: only the last run counts.
        ([0, 12, 0, 4, 6, 6], 2000, 6000),
        ([1, 2, 3], None, None),
    ],
)
def test_first_and_sustained_crossings_of_hand_made_curves(values, first, sustained):
    curve = steps(values)
    assert table3.first_crossing(curve, 5.0) == first
    assert table3.sustained_crossing(curve, 5.0) == sustained


def test_a_sustained_crossing_is_never_before_the_first_and_holds_to_the_end():
    rng = np.random.default_rng(0)
    for _ in range(500):
        n = int(rng.integers(1, 12))
        curve = steps(rng.normal(5.0, 3.0, n).round(1))
        first = table3.first_crossing(curve, 5.0)
        sustained = table3.sustained_crossing(curve, 5.0)
        if sustained is None:
            continue
        assert first is not None and first <= sustained
        i = [s for s, _ in curve].index(sustained) - 2  # the first evaluation of its window
        means = [np.mean([v for _, v in curve[j : j + 3]]) for j in range(i, len(curve) - 2)]
        assert min(means) >= 5.0
        if i > 0:  # the window before it is below the score, or it would start there
            assert np.mean([v for _, v in curve[i - 1 : i + 2]]) < 5.0


def metrics_lines(evals, eval_every=2, steps_per_gen=1000, eval_steps=400, counted=True):
    """A hand-made metrics.jsonl: `evals` returns, one per block of `eval_every` generations
    of `steps_per_gen` env steps (alive: half of them); each evaluation `eval_steps` simulated
    and `eval_steps // 2` lived, written where `counted`."""
    lines, total = [], 0
    for i, value in enumerate(evals):
        for g in range(eval_every):
            total += steps_per_gen
            line = {"generation": i * eval_every + g + 1, "env_steps": steps_per_gen}
            line |= {"alive_steps": steps_per_gen // 2, "total_env_steps": total}
            if counted:
                done = i + (g == eval_every - 1)
                line |= {
                    "eval_env_steps": done * eval_steps,
                    "eval_alive_steps": done * eval_steps // 2,
                }
            if g == eval_every - 1:
                line["eval_return"] = value
            lines.append(line)
    return lines


CONFIG = {"episode_length": 1000, "eval_episodes": 8, "population_size": 8, "eval_every": 2}


def record_of(env, seeds_curves, commands=("--seeds",)):
    """A Table 3 record of `env` whose seeds have these curves."""
    paper = table3.PAPER[env]
    seeds = []
    for seed, curve in seeds_curves.items():
        seeds.append({"seed": seed, "curve": curve, "env_steps_used": curve[-1][0],
                      "alive_steps_used": curve[-1][2]})  # fmt: skip
    machine = {"git": "abc1234", "cpu_model": "Intel(R) Xeon(R) Processor", "cpu_cores": 2}
    machine |= {"ram_gib": 23.5, "jax": "0.10.2"}
    sitting = {"command": ["-m", "jaxes", "train", *commands], "machine": machine}
    return {
        "env": env,
        "paper": {"thresholds": list(paper["thresholds"]),
                  "es_timesteps": list(paper["es_timesteps"])},
        "settings": {"jaxes_config": CONFIG | {"strategy": "open_es", "sigma": 0.1,
                     "learning_rate": 0.03, "l2_coeff": 0.0, "policy": "linear",
                     "backend": "spring"}},
        "sittings": [sitting | {"started_utc": "2026-12-05T12:00:00+00:00"}],
        "bound": {"applied": "timesteps", "env_steps_used": 1, "wall_s_used": 1.0},
        "seeds": seeds,
    }  # fmt: skip


def test_evaluation_steps_written_by_a_run_are_counted():
    """A run that wrote eval_env_steps: every crossing is at training's plus the evaluations'
    steps so far, in both counts, exactly."""
    lines = table3.add_alive_totals(metrics_lines([100, 300, 900, 1000, 1000]))
    curve = table3.recorded_curve(lines)
    assert curve[1] == [4000, 300.0, 2000, 800, 400]  # two evaluations of 400 steps so far
    record = record_of("hopper", {0: curve, 1: curve})
    m = table3.measure_env(record)
    assert m["kind"] == "counted" and m["seeds"] == [0, 1]
    # hopper's 25 % score (877.45) is first reached at the third evaluation: 6000 + 3 x 400.
    assert m["first"]["median"]["low"][0] == m["first"]["median"]["high"][0] == 7200
    assert m["first"]["median"]["training"][0] == 6000  # the count before issue 60
    assert m["first"]["median"]["alive_low"][0] == 3000 + 600
    assert m["sustained"]["median"]["low"][0] == 10000 + 5 * 400  # mean of 900, 1000, 1000
    # 50 % never reached, by runs that stopped short of the paper's steps: cannot tell.
    assert m["first"]["within"][0] is True and m["first"]["within"][1] is None
    assert m["eval_share"] == [pytest.approx(2000 / 12000)] * 2
    row = table3.table3_markdown([record | {"measures": m}]).splitlines()[-1]
    assert row.startswith("| hopper | 0–1 | counted | 7.2e3 (2/2) | not reached (0/2) |")


def test_an_older_record_is_labelled_and_its_evaluation_steps_bounded_or_exact():
    """A record without eval_env_steps: evaluation steps from its config, exact where
    episodes never end early (swimmer), between bounds where they may (hopper), and from the
    returns where the return is the episode length (inverted_pendulum)."""
    old = [p[:3] for p in table3.recorded_curve(table3.add_alive_totals(
        metrics_lines([100, 300, 900, 1000, 1000], counted=False)))]  # fmt: skip
    assert old[2] == [6000, 900.0, 3000]
    exact = table3.measure_env(record_of("swimmer", {0: old}))
    assert exact["kind"] == "exact"
    # swimmer's 25 % score (41.97) at the first evaluation: 2000 + 8 x 1000 steps played.
    assert exact["first"]["median"]["low"][0] == exact["first"]["median"]["high"][0] == 10000
    bounded = table3.measure_env(record_of("hopper", {0: old}))
    assert bounded["kind"] == "bounded"
    low, high = bounded["first"]["median"]["low"][0], bounded["first"]["median"]["high"][0]
    assert (low, high) == (6000 + 3 * 400, 6000 + 3 * 8000)  # one chunk to every chunk
    assert bounded["first"]["within"][0] is True  # 3.0e4 <= 3.83e5 even at the most
    assert bounded["eval_share"][0] < bounded["eval_share"][1]
    # inverted_pendulum pays 1 a step: its 25 % score (276.59) at the second evaluation,
    # after 8 x (100 + 300) steps lived in evaluations; simulated, the longest of episodes of
    # mean 100 lies between 100 (2 chunks) and 793 (16 chunks), of 300 between 300 (6) and
    # 2393 (all 20).
    pendulum = table3.measure_env(record_of("inverted_pendulum", {0: old}))
    median = pendulum["first"]["median"]
    assert median["alive_low"][0] == median["alive_high"][0] == 2000 + 8 * (100 + 300)
    assert (median["low"][0], median["high"][0]) == (4000 + 400 * (2 + 6), 4000 + 400 * (16 + 20))
    # Bounds that straddle the paper's timesteps decide nothing: "?".
    assert table3.verdict(True, False) is None and table3.verdict(False, False) is False
    row = table3.table3_markdown([record_of("hopper", {0: old}) | {"measures": bounded}])
    assert "| hopper | 0 | bounded: the evaluations' least – most | 7.2e3–3e4 (1/1) |" in row
    assert "| swimmer | 0 | exact (no early ends) |" in table3.table3_markdown(
        [record_of("swimmer", {0: old}) | {"measures": exact}]
    )


def test_records_that_stopped_at_the_final_score_give_no_sustained_100_percent():
    curve = table3.recorded_curve(table3.add_alive_totals(metrics_lines([900] * 6)))
    stopped = record_of("hopper", {0: curve}, commands=("--target-return", "3403.46"))
    for record, last in ((stopped, "n/a"), (record_of("hopper", {0: curve}), "not reached (0/1)")):
        measured = record | {"measures": table3.measure_env(record)}
        cells = table3.table3_markdown([measured]).splitlines()[-1].split(" | ")
        assert cells[10] == last


@pytest.mark.parametrize("population", [2, 4, 8, 16, 32, 64, 256])
def test_the_cadence_keeps_evaluation_within_its_share_and_no_lower(population):
    every = table3.eval_every_for(population)
    assert table3.eval_share(every, population) <= 0.1 + 1e-12
    if every > 1:
        assert table3.eval_share(every - 1, population) > 0.1
    # Two episodes per member halve training's share of the cost per generation: fewer.
    assert table3.eval_every_for(population, episodes_per_member=2) <= every


@pytest.mark.parametrize("env", table3.ENVS)
def test_each_env_is_sat_at_its_cadence_and_without_a_stop_at_the_final_score(env):
    """The sitting's command, parsed by `jaxes train`'s own parser: eval_every from the rule
    (evaluation <= 10 % of full-length episodes), a checkpoint at every evaluation, no target
    return (a sustained crossing needs the evaluations after a first one)."""
    cmd = table3.jaxes_command(env, "15-20", 1000, Path("/tmp/never-made"), False)
    args = cli_parser.parser().parse_args(cmd[3:])
    assert args.seeds == list(range(15, 21))
    given = {f: getattr(args, f) for _, f, _, _ in cli_parser.TRAIN_FLAGS}
    config = TrainConfig.make(**{k: v for k, v in given.items() if v is not None}).to_dict()
    setting = presets.preset(env, name="table3")
    assert config["eval_every"] == config["checkpoint_every"] == table3.env_eval_every(env)
    assert table3.eval_share(config["eval_every"], setting["population_size"]) <= 0.1 + 1e-12
    assert config["target_return"] is None and "--target-return" not in cmd


def test_seeds_are_judged_as_asked_and_the_table_says_which_where_and_how(tmp_path, capsys):
    """`--report --seeds 15-20`: the records' seeds picked (a seed not recorded is refused),
    the tables labelled with them, and each names the runs' commits and CPU, and the commit,
    CPU and command that recompute it; nothing runs."""
    lines = table3.recorded_curve(table3.add_alive_totals(metrics_lines([100, 900, 900, 900])))
    record = record_of("hopper", {n: lines for n in range(12, 21)})
    (tmp_path / "hopper.json").write_text(json.dumps(record))
    args = table3.parse_args(["--report", "--seeds", "15-20", "--envs", "hopper,swimmer"])
    args.results = tmp_path
    table3.run(args, [table3.__file__])
    out = capsys.readouterr().out
    assert "swimmer: no record" in out
    assert "Judged on seeds 15–20." in out and "| hopper | 15–20 | counted |" in out
    assert "measured at commit(s) abc1234" in out and "Intel(R) Xeon(R) Processor" in out
    assert f"on {table3.cpu_model()} by `.venv/bin/python benchmarks/table3.py --report" in out
    assert "--seeds 15-20 --envs hopper`" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hopper.json"]  # nothing ran
    judged = table3.judged_record(record, [15, 16])
    assert [s["seed"] for s in judged["seeds"]] == [15, 16] and len(record["seeds"]) == 9
    with pytest.raises(ValueError, match=r"seeds \[21\] are not in the record"):
        table3.judged_record(record, [20, 21])
    assert table3.seeds_arg([15, 16, 17, 18, 19, 20]) == "15-20"
    assert table3.parse_seeds(table3.seeds_arg([0, 1, 2, 5, 7, 8])) == [0, 1, 2, 5, 7, 8]


def test_the_headline_counts_envs_within_and_undecided():
    def measured(env, first, sustained):
        return {"measures": {"first": {"within": first}, "sustained": {"within": sustained}}}

    records = [measured("a", [True, True, None, False], [False, True, None, None]),
               measured("b", [True, False, None, None], [False, False, False, None])]  # fmt: skip
    assert table3.headline(records) == (
        "Within the paper's ES timesteps, every env step counted: first crossing: 25 % 2, "
        "50 % 1, 75 % 0 (2 undecided) of 2 envs; sustained crossing: 25 % 0, 50 % 1, 75 % 0 "
        "(1 undecided) of 2 envs."
    )
