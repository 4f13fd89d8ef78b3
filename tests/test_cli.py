"""`jaxrl sweep` (grid and random points from flags, results table, summary) and `jaxrl plot` on a sweep."""

import csv
import json
import sys

import numpy as np
import pytest

from conftest import refusal
from jaxrl import cli
from jaxrl.algos import ALGORITHMS, ppo
from jaxrl.plot import read_sweep
from jaxrl.sweep import space

TINY = "--num-envs 4 --num-steps 16 --total-timesteps 320 --update-epochs 1 --num-minibatches 2 --hidden-sizes 16,16"


def sweep_args(text):
    args = cli.build_parser().parse_args(["sweep", "ppo", *text.split()])
    return space.from_flags(cli.config_from_args(ppo.Config, args), args.grid, args.random, args.dist, args.random_seed)


def python_c(code: str, timeout: float = 600):
    """`python -c code` in a fresh process (what it imports is its own): the finished process, output as text."""
    import subprocess

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)


def test_grid_and_random_flags():
    grid = sweep_args("--grid learning_rate=1e-3,3e-3 --grid clip-eps=0.1,0.2,0.3")
    assert len(grid) == 6 and grid.points[1] == {"learning_rate": 1e-3, "clip_eps": 0.2}
    random = sweep_args(
        "--random 50 --random-seed 2 --dist learning_rate=loguniform:1e-4:1e-2 --dist ent_coef=0,0.01"
        " --dist gae_lambda=uniform:0.8:1"
    )
    lr = np.array([p["learning_rate"] for p in random.points])
    assert len(random) == 50 and lr.min() >= 1e-4 and lr.max() <= 1e-2
    assert {p["ent_coef"] for p in random.points} == {0.0, 0.01}
    assert all(0.8 <= p["gae_lambda"] <= 1 for p in random.points)
    assert sweep_args("").points == [{}]  # no flags: the base config alone


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ("--grid num_envs=4,8", "static field"),
        ("--grid learning_rate", "expected NAME=VALUES"),
        ("--grid learning_rate=1e-3 --random 3 --dist clip_eps=uniform:0.1:0.2", "either --grid or --random"),
        ("--random 3", "needs at least one --dist"),
        ("--dist clip_eps=uniform:0.1:0.2", "needs --random"),
        ("--random 3 --dist clip_eps=normal:0:1", "unknown distribution 'normal'"),
        ("--random 3 --dist clip_eps=uniform:0.1", "expected clip_eps=uniform:LOW:HIGH"),
        ("--grid learning_rate=-1,1e-3", "Config.learning_rate: got -1.0, must be > 0.0."),
        ("--grid activation=relu", "Config.activation: a static field"),
        ("--grid learning_rat=1e-3", "Config.learning_rat: unknown field, jaxrl.algos.ppo.Config has no field"),
    ],
)
def test_bad_sweep_flags_are_clear_errors(flags, message, tmp_path, capsys):
    assert cli.main(["sweep", "ppo", *flags.split(), "--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "results.csv").exists()


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_multi_process_flags_need_the_coordinator_and_the_process_id(command, tmp_path, capsys):
    """The same check for both commands (`sweep.devices.start_processes`), before JAX joins any process."""
    out_flag, what = ("--run-dir", "training") if command == "train" else ("--out", "sweep")
    for flags in ("--coordinator 127.0.0.1:1", "--num-processes 2 --process-id 0"):
        assert cli.main([command, "ppo", *flags.split(), out_flag, str(tmp_path / "out")]) == 2
        assert f"a multi-process {what} needs --coordinator" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_sweep_command_writes_results_summary_and_plot(tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = f"sweep ppo {TINY} --grid learning_rate=1e-3,5e-3 --seeds 3 --seed 1 --out {out}"
    assert cli.main(argv.split()) == 0
    printed = capsys.readouterr().out
    assert "2 config(s) x 3 seed(s)" in printed and "95% interval" in printed and "compile" in printed

    rows = list(csv.DictReader(open(out / "results.csv")))
    assert len(rows) == 2 * 3 * 5 and rows[0]["learning_rate"] == "0.001"
    summary = list(csv.DictReader(open(out / "summary.csv")))
    _, _, final = read_sweep(out / "results.csv")
    for row, runs in zip(summary, final, strict=True):
        assert float(row["final_return_mean"]) == pytest.approx(np.nanmean(runs), rel=1e-6)  # float32 metrics
        assert float(row["ci95_low"]) <= float(row["final_return_mean"]) <= float(row["ci95_high"])
        assert row["seeds"] == "3"
    info = json.loads((out / "sweep.json").read_text())
    assert info["points"] == [{"learning_rate": 1e-3}, {"learning_rate": 5e-3}] and info["processes"] == 1
    assert info["config"]["num_envs"] == 4 and info["seeds"] == 3

    # `jaxrl plot FOLDER` recognises a sweep folder and draws the sensitivity plot
    assert cli.main(["plot", str(out), "--out", str(tmp_path / "s.png")]) == 0
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"
    assert cli.main(["plot", "--sensitivity", str(out / "results.csv"), "--out", str(tmp_path / "t.png")]) == 0
    assert (tmp_path / "t.png").stat().st_size > 10_000


@pytest.mark.extended
def test_a_quiet_sweep_prints_its_summary_alone(tmp_path, capsys):
    argv = f"sweep ppo {TINY} --grid learning_rate=1e-3 --seeds 1 --out {tmp_path / 'sweep'} --quiet"
    assert cli.main(argv.split()) == 0
    printed = capsys.readouterr()
    assert "config(s) x" not in printed.out and "95% interval" in printed.out and printed.err == ""


def test_sweep_device_independent_reaches_the_program(tmp_path, monkeypatch):
    """`jaxrl sweep --device-independent` compiles the sweep without XLA's algebraic simplifier (`sweep.run`'s
    `device_independent`), and without the flag with it."""
    from jaxrl import sweep

    asked = []

    def run(points, **options):
        asked.append(options["device_independent"])
        raise ValueError("stopped before compiling")

    monkeypatch.setattr(sweep, "run", run)
    argv = ["sweep", "ppo", "--grid", "learning_rate=1e-3,2e-3", "--seeds", "1", "--quiet", "--out", str(tmp_path)]
    assert cli.main([*argv, "--device-independent"]) == 2 and cli.main(argv) == 2
    assert asked == [True, False]


def test_plot_needs_something_to_plot(capsys):
    assert cli.main(["plot"]) == 2
    assert "--sensitivity" in capsys.readouterr().err


def test_field_values_follow_the_field_type():
    from jaxrl.sweep_flags import value_of

    assert value_of("int", "num_envs", "1e3") == 1000
    assert value_of("bool", "anneal_lr", "false") is False
    assert value_of("float", "learning_rate", "3e-4") == 3e-4
    with pytest.raises(ValueError, match="not an integer"):
        value_of("int", "num_envs", "2.5")
    with pytest.raises(ValueError, match=r"Config.learning_rate: 'fast' is not a number."):
        value_of("float", "learning_rate", "fast")


def test_preset_flag_starts_from_the_package_preset_and_flags_override():
    from jaxrl import presets
    from jaxrl.algos import ppo

    args = cli.build_parser().parse_args(
        ["train", "ppo", "--env", "Pendulum-v1", "--preset", "--learning-rate", "3e-4"]
    )
    config = cli.config_from_args(ppo.Config, args)
    assert config == presets.get("ppo", "Pendulum-v1", learning_rate=3e-4)
    assert config.num_minibatches == presets.PRESETS["ppo", "Pendulum-v1"]["num_minibatches"]
    plain = cli.config_from_args(ppo.Config, cli.build_parser().parse_args(["train", "ppo", "--env", "Pendulum-v1"]))
    assert plain == ppo.Config(env="Pendulum-v1")


@pytest.mark.parametrize(
    "argv",
    [["eval", "runs/x"], ["train", "ppo", "--num-envs", "8"], ["sweep", "dqn", "--grid", "gamma=0.9,0.99"]],
)
def test_parsing_imports_no_jax(argv):
    """`import jaxrl.cli` and a parse of any command line, train's and sweep's algorithm flags included, start
    neither JAX nor an algorithm: the flags come from `jaxrl.catalog`; the commands import JAX when they run."""
    code = (
        "import sys, jaxrl.cli\n"
        f"jaxrl.cli.build_parser({argv[0]!r}).parse_args({argv!r})\n"
        "print(sorted(m for m in sys.modules if m == 'jax' or m.startswith(('jax.', 'flax', 'jaxrl.algos'))))"
    )
    done = python_c(code)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_the_catalog_matches_the_algorithms():
    """The command line's description of every algorithm (its doc line; each Config field's kind, default and
    help) is what the algorithms say; `python -m jaxrl.catalog` regenerates it after a Config changes."""
    from jaxrl import catalog

    assert catalog.CATALOG == catalog.build()
    assert [f[:3] for f in catalog.CATALOG["ppo"]["fields"][:2]] == [
        ["env", "str", "CartPole-v1"], ["total_timesteps", "int", "200000"]
    ]  # fmt: skip


def test_the_env_ids_match_the_environments_and_are_refused_in_their_words():
    """The env ids the command line knows without JAX (`jaxrl/env_ids.json`) are gymnax's and jaxrl's own, as a fresh
    process registers them, for the installed gymnax, and the facts it records of a sample of them (observation
    shape, discrete actions, time limit) are the envs'; and before JAX (`jaxrl.catalog.check_env_id`) and after
    (`jaxrl.envs.check_env_id`), in that fresh process, each id gets the same refusal, or none; a suite's names are
    those its adapter gives for the version recorded, with the facts of a sample of its envs (those of a Brax env
    are held to its own in `tests/test_config_rules.py`). For another gymnax version the early check judges no
    plain id and leaves them all to `validate`; so for another version of a suite its names."""
    from jaxrl import catalog

    sample = ["CartPole-v1", "Pendulum-v1", "Breakout-MinAtar", "MemoryChain-bsuite-L10", "DeepSea-bsuite",
              "popgym-RepeatPreviousEasy-v0", "navix:Navix-Empty-5x5-v0", "xminigrid:MiniGrid-Empty-5x5"]  # fmt: skip

    ids = ["CartPole-v0", "cartpole", "Nope", "MemoryChain-bsuite-L11", "popgym-CountRecallEasy-v1", "navx:Nope",
           "CartPole-v1", "MemoryChain-bsuite-L20", "popgym-RepeatPreviousHard-v0", "Breakout-MinAtar",
           "navix:Nope"]  # fmt: skip
    code = (
        "import json\n"
        "from jaxrl import catalog, envs\n"
        "def refusal(check, env_id):\n"
        "    try:\n"
        "        check(env_id)\n"
        "    except Exception as error:\n"
        "        return str(error)\n"
        f"pairs = [[refusal(catalog.check_env_id, i), refusal(envs.check_env_id, i)] for i in {ids!r}]\n"
        f"print(json.dumps({{'ids': catalog.build_env_ids({sample!r}), 'pairs': pairs}}))"
    )
    fresh = json.loads(python_c(code).stdout)
    if catalog.gymnax_version() != catalog.ENV_IDS["gymnax_version"]:
        assert all(early is None for early, _ in fresh["pairs"])
        return
    recorded, made = dict(catalog.ENV_IDS), fresh["ids"]
    facts, suite_ids, made_suite_ids = recorded.pop("facts"), recorded.pop("suite_ids"), made.pop("suite_ids")
    assert {id_: facts[id_] for id_ in sample if ":" not in id_} == made.pop("facts") and recorded == made
    assert set(suite_ids) <= set(recorded["suites"]) and suite_ids["navix"]["ids"]
    for prefix, entry in made_suite_ids.items():  # each installed suite of the recorded version: the same names,
        if entry["version"] == suite_ids.get(prefix, {}).get("version"):  # and the sample's facts
            made_facts, recorded_entry = entry.pop("facts"), dict(suite_ids[prefix])
            recorded_facts = recorded_entry.pop("facts")
            assert {name: recorded_facts[name] for name in made_facts} == made_facts, prefix
            assert entry == recorded_entry and len(made_facts) == sum(i.startswith(f"{prefix}:") for i in sample)
    assert len(catalog.ENV_IDS["facts"]) >= len(made["gymnax"]) + len(made["own"]) - 2  # a few need a dataset
    assert "CartPole-v1" in fresh["ids"]["gymnax"] and "MemoryChain-bsuite-L10" in fresh["ids"]["own"]
    navix_recorded = made_suite_ids.get("navix", {}).get("version") == suite_ids["navix"]["version"]
    for env_id, (early, late) in zip(ids, fresh["pairs"], strict=True):
        if env_id.startswith("navix:") and not navix_recorded:  # its names wait for the suite's import
            assert early is None and late is not None, env_id
        else:
            assert early == late, env_id
    assert [early is None for early, _ in fresh["pairs"]] == [False] * 6 + [True] * 4 + [not navix_recorded]


def test_a_suite_unknown_or_not_installed_is_refused_before_jax_in_its_words(monkeypatch):
    """`suite:Name` of a suite jaxrl does not know, or of one whose package is not installed (here navix's, named
    as a package that does not exist), is refused without importing the suite, in the words of
    `jaxrl.envs.suites` once it is imported; `env_ids.json` records the suites' packages as the table has them. A
    name the suite lacks is refused from the recorded names only for the installed suite's recorded version."""
    from jaxrl import catalog
    from jaxrl.envs import suites

    assert catalog.ENV_IDS["suites"] == {prefix: suite.package for prefix, suite in suites.SUITES.items()}
    monkeypatch.setitem(catalog.ENV_IDS["suites"], "navix", "navix_not_installed")
    monkeypatch.setitem(suites.SUITES, "navix", suites.Suite("navix_not_installed", "navix:Navix-Empty-5x5-v0"))
    for env_id, words in [("navix:Navix-Empty-5x5-v0", "need the navix extra"), ("navx:Foo", "unknown suite prefix")]:
        early, late = (refusal(check, env_id) for check in (catalog.check_env_id, suites.check_id))
        assert early == late and words in early, (early, late)
    xland = catalog.ENV_IDS["suite_ids"]["xminigrid"]
    if catalog.installed_version(xland["distribution"]) == xland["version"]:
        assert "is not a xminigrid environment" in refusal(catalog.check_env_id, "xminigrid:Nope")
    monkeypatch.setitem(catalog.ENV_IDS["suite_ids"], "xminigrid", {**xland, "version": "0.0.0"})
    assert refusal(catalog.check_env_id, "xminigrid:Nope") is None  # another version's names wait for its import


def test_an_algorithm_is_summed_up_in_a_whole_phrase():
    """`jaxrl train --help` lists each algorithm as a phrase that ends where its citation begins, never a docstring
    line cut where it wrapped ("... with Importance")."""
    from jaxrl import catalog

    wrapped = 'Twin Delayed DDPG (Fujimoto 2018, "Addressing Function\nApproximation Error"): see\n\nDetails.'
    assert catalog.summary(wrapped) == "Twin Delayed DDPG"
    assert catalog.summary("REINFORCE: the Monte Carlo policy\ngradient.\n\nMore.") == (
        "REINFORCE: the Monte Carlo policy gradient"
    )
    assert catalog.CATALOG["impala"]["doc"] == "V-trace actor-critic"


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_help_shows_each_default_once(command, capsys):
    """A flag's help names its default once: either its own text says it or "(default: X)" is appended, never
    both, and nothing shows "(default: None)"."""
    import re

    with pytest.raises(SystemExit):
        cli.build_parser(command).parse_args([command, "ppo", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    entries = re.split(r" (?=--?[a-z][a-z-]* [A-Z,|]*)", text)
    assert len(entries) > 40
    for entry in entries:
        assert entry.count("default") <= 1, entry
    assert "(default: None)" not in text
    assert "(default: 20)" in text if command == "train" else "(default: 4)" in text


def test_sweep_out_that_is_a_file_is_refused_before_training(tmp_path, capsys):
    taken = tmp_path / "results"
    taken.write_text("not a folder")
    code = cli.main(["sweep", "ppo", *TINY.split(), "--grid", "learning_rate=1e-3,3e-3", "--out", str(taken)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and str(taken) in err
    assert taken.read_text() == "not a folder"


def test_a_terminal_hears_what_train_is_doing_before_jax_starts(monkeypatch, capsys):
    """On a terminal the first line comes before JAX is imported (`commands.status`); with --quiet or when
    stderr is not a terminal (logs, pipes) nothing is printed."""
    import argparse

    from jaxrl import commands

    args = argparse.Namespace(command="train", algo="ppo", no_progress=True, quiet=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    commands.status(args, "starting JAX and ppo")
    assert capsys.readouterr().err == "jaxrl train ppo: starting JAX and ppo\n"
    commands.status(argparse.Namespace(**{**vars(args), "quiet": True}), "x")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    commands.status(args, "x")
    assert capsys.readouterr().err == ""


def test_an_error_before_any_run_imports_no_jax():
    """A bad flag value or a mistyped algorithm is one line from the parser, and `user_errors` (exit 2 or 1)
    loads nothing: the command line answers without starting JAX."""
    code = (
        "import sys, jaxrl.cli\n"
        "try:\n    jaxrl.cli.main(['train', 'PPO'])\nexcept SystemExit as e:\n    print(e.code)\n"
        "print(jaxrl.cli.user_errors()[:5] == (ValueError, TypeError, OSError, OverflowError, ImportError))\n"
        "print(sorted(m for m in sys.modules if m == 'jax' or m.startswith(('jax.', 'jaxrl.algos'))))"
    )
    done = python_c(code)
    assert done.stdout.split() == ["2", "True", "[]"], done.stdout + done.stderr
    assert "invalid choice: 'PPO'" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_config_error_loads_no_distribution_library():
    """A Config that its algorithm refuses (checked once JAX and the algorithm are imported) is a one-line error
    (exit 2) without distrax or TensorFlow Probability loaded: they are imported where a distribution is built,
    at trace time, and a V-MPO module import or a recurrent head's import does not load them either."""
    code = (
        "import sys, jaxrl.cli\n"
        "print(jaxrl.cli.main(['train', 'ppo', '--learning-rate', '-1']))\n"
        "import jaxrl.algos.vmpo, jaxrl.networks.recurrent\n"
        "print(sorted(m for m in ('distrax', 'tensorflow_probability') if m in sys.modules))\n"
        "print('jaxrl.algos.ppo' in sys.modules)"
    )
    done = python_c(code)
    assert done.stdout.split() == ["2", "[]", "True"], done.stdout + done.stderr
    assert done.stderr.strip() == "jaxrl: error: Config.learning_rate: got -1.0, must be > 0.0."


def refused_before_jax(cases: list[tuple[list, str]], prefix: str = "jaxrl: error: ") -> None:
    """Runs each (argv, message) of `cases` through `jaxrl.cli.main` in one fresh process, and checks that each
    exits 2 with one line `jaxrl: error: ...` (or `prefix` ...) holding its message, and that JAX, the algorithms
    and orbax were never imported."""
    code = (
        "import sys, jaxrl.cli\n"
        f"for argv in {[[str(a) for a in argv] for argv, _ in cases]!r}:\n"
        "    try:\n"
        "        print(jaxrl.cli.main(argv))\n"
        "    except SystemExit as stop:  # argparse's refusal of a flag's value\n"
        "        print(stop.code)\n"
        "print(sorted(m for m in sys.modules if m == 'jax' or m.startswith(('jax.', 'jaxrl.algos', 'orbax'))))"
    )
    done = python_c(code)
    assert done.stdout.split() == ["2"] * len(cases) + ["[]"], done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == len(cases), done.stderr
    for line, (argv, message) in zip(lines, cases, strict=True):
        assert line.startswith(prefix) and message in line, (argv, line)


def test_a_folder_the_command_cannot_use_is_refused_before_jax_starts(tmp_path):
    """A --resume folder that is missing, is not a run folder or holds another algorithm's run, a new run's
    --run-dir (pbt: --out) that is a file or holds a run, a new run's folder (--run-dir, --runs-dir, sweep's and
    pbt's --out) that cannot be made, a folder given to eval or render that is not a run folder, and a render of
    another file type or of a seed the run does not have, and a plot of a folder without metrics or of a run without
    an iteration: each is one line (exit 2) from a process that never
    imports JAX, an algorithm or orbax."""
    run, empty, file, missing = tmp_path / "run", tmp_path / "empty", tmp_path / "file", tmp_path / "missing"
    run.mkdir()
    empty.mkdir()
    file.write_text("not a folder")
    (run / "config.json").write_text(json.dumps({"algo": "ppo", "config": {}, "seeds": 1, "seed": 0}))
    (run / "summary.json").write_text("{}")  # a finished run: a new run would overwrite it
    started = tmp_path / "started"  # a run stopped before its first chunk's metrics
    started.mkdir()
    (started / "metrics.csv").write_text("seed,iteration,episode_return\n")
    cases = [
        (["train", "ppo", "--resume", missing], f"{missing}: no such run folder."),
        (["train", "ppo", "--resume", empty], f"{empty} is not a run folder (no config.json)."),
        (["train", "dqn", "--resume", run], f"--resume {run}: it is a ppo run; continue it with jaxrl train ppo"),
        (["train", "ppo", "--run-dir", run], f"run folder {run} already holds a run (config.json, summary.json)"),
        (["train", "ppo", "--run-dir", file], f"run folder {file} is a file; choose another --run-dir."),
        (["pbt", "ppo", "--out", run, "--explore", "gamma=uniform:0.9:1"], "or choose a new --out."),
        (["pbt", "ppo", "--resume", empty], f"{empty} is not a run folder (no config.json)."),
        (["eval", missing], f"{missing}: no such run folder."),
        (["plot", missing], f"{missing}: no such run folder."),
        (["plot", empty], f"{empty} holds no metrics.csv: not a run folder, or a run stopped before its first chunk."),
        (["plot", started], f"{started / 'metrics.csv'} holds no iterations yet."),
        (["render", empty], f"{empty} is not a run folder (no config.json)."),
        (["render", run, "--out", "episode.avi"], "--out episode.avi: write a .gif or an .mp4."),
        (["render", run, "--seed-index", "5"], "--seed-index 5: the run has seeds 0 to 0."),
        (["train", "ppo", "--run-dir", file / "a"], f"cannot create run folder {file / 'a'}: Not a directory."),
        (["train", "ppo", "--runs-dir", file / "a"], f"cannot create --runs-dir {file / 'a'}: Not a directory."),
        (["sweep", "ppo", "--out", file / "a"], f"cannot create --out {file / 'a'}: Not a directory."),
        (["pbt", "ppo", "--out", file / "a", "--explore", "ent_coef=uniform:0:0.1"], "cannot create run folder"),
    ]
    refused_before_jax(cases)
    assert file.read_text() == "not a folder" and sorted(p.name for p in run.iterdir()) == [
        "config.json", "summary.json"
    ]  # fmt: skip
    from jaxrl.run import folder

    folder.check_folder_can_be_made(empty / "a" / "b", "run folder")  # made, then removed again
    assert list(empty.iterdir()) == []


def test_a_flag_value_its_field_refuses_is_refused_before_jax_starts():
    """A Config flag whose value breaks its field's own rule (a range, an integer's minimum, a choice) is refused
    by train, sweep and pbt in the words `validate` uses, before JAX starts, and so is a sweep flag that names an
    unknown or a static field, an unknown distribution, or a value (a distribution's bound) its field refuses; so
    are an env id no installed environment has, and a suite name of the suite version recorded."""
    cases = [
        (["train", "ppo", "--learning-rate", "-1"], "Config.learning_rate: got -1.0, must be > 0.0."),
        (["train", "ppo", "--gamma", "1.5"], "Config.gamma: got 1.5, must be <= 1.0."),
        (["train", "ppo", "--num-envs", "0"], "Config.num_envs: got 0, must be an integer >= 1."),
        (["train", "ppo", "--hidden-sizes", "0,64"], "Config.hidden_sizes: got (0, 64), must be positive integers"),
        (["train", "ppo", "--activation", "sigmoid"], "Config.activation: 'sigmoid' is not one of tanh, relu,"),
        (["train", "dqn", "--tau", "0", "--resume", "anywhere"], "Config.tau: got 0.0, must be > 0.0."),
        (["train", "sac", "--alpha-learning-rate", "0"], "Config.alpha_learning_rate: got 0.0, must be > 0.0."),
        (["sweep", "grpo", "--kl-reference", "latest"], "Config.kl_reference: 'latest' is not one of none,"),
        (["pbt", "ppo", "--ent-coef", "-0.01"], "Config.ent_coef: got -0.01, must be >= 0.0."),
        (["sweep", "ppo", "--grid", "learning_rat=1e-3"], "Config.learning_rat: unknown field, jaxrl.algos.ppo.Config"),
        (["sweep", "ppo", "--grid", "num_envs=4,8"], "Config.num_envs: a static field"),
        (["sweep", "ppo", "--grid", "gamma=0.9,1.5"], "Config.gamma: got 1.5, must be <= 1.0."),
        (["sweep", "dqn", "--random", "2", "--dist", "tau=uniform:0:1"], "Config.tau: got 0.0, must be > 0.0."),
        (["sweep", "ppo", "--random", "4", "--dist", "gamma=loguni:0.9:1"], "unknown distribution 'loguni'"),
        (["train", "ppo", "--env", "CartPole-v0"], "env='CartPole-v0' is not a registered gymnax environment."),
        (["sweep", "dqn", "--env", "cartpole"], "Did you mean 'CartPole-v1'?"),
        (["train", "ppo", "--env", "navx:Navix-Empty-5x5-v0"], "unknown suite prefix 'navx' (known: navix:, craftax:"),
    ]
    from jaxrl import catalog

    playground = catalog.ENV_IDS["suite_ids"]["playground"]
    if catalog.installed_version(playground["distribution"]) == playground["version"]:  # its recorded names apply
        cases.append((["train", "ppo", "--env", "playground:CartpoleBalanc"], "is not a playground environment."))
    refused_before_jax(cases)


def test_fields_that_break_their_algorithm_rules_together_are_refused_before_jax_starts():
    """Config flags each valid alone but not together or not with the env (a minibatch count that does not divide
    the batch, a buffer that is not a multiple of the envs, a GTrXL width its heads do not divide, a run shorter
    than an iteration, an image torso on CartPole, a Q-learner on continuous actions, a GRPO horizon that is the
    env's time limit) are refused by train, sweep and pbt before JAX starts, in the words of the algorithm's
    `validate`; a suite's env's too."""
    cases = [
        (["train", "ppo", "--num-minibatches", "7"], "Config.num_minibatches: 7 does not divide the batch num_envs"),
        (["train", "dqn", "--num-envs", "8", "--buffer-size", "100"], "Config.buffer_size: 100 is not a multiple"),
        (["train", "ppo", "--core", "gtrxl", "--core-size", "30"], "Config.core_size: 30 is not a multiple of 4"),
        (["sweep", "trpo", "--vf-minibatches", "7"], "Config.vf_minibatches: 7 does not divide the batch"),
        (["pbt", "grpo", "--group-size", "1", "--explore", "clip_eps=uniform:0.1:0.3"], "Config.group_size: got 1;"),
        (["train", "sac", "--total-timesteps", "1"], "Config.total_timesteps: 1 is less than one iteration"),
        (["train", "ppo", "--torso", "cnn"], "Config.torso: 'cnn' needs image observations [H, W, C]; CartPole-v1"),
        (["train", "dqn", "--env", "Pendulum-v1"], "Config.env: Pendulum-v1 has continuous actions; DQN needs"),
        (["sweep", "td3", "--env", "CartPole-v1"], "Config.env: CartPole-v1 has discrete actions; TD3 needs"),
        (["train", "grpo", "--num-minibatches", "7"], "does not divide the batch num_groups * group_size * horizon"),
    ]
    from jaxrl import catalog

    suite_cases = [  # a suite's env, from the facts recorded for its installed version
        (["train", "dqn", "--env", "brax:ant"], "Config.env: brax:ant has continuous actions; DQN needs"),
        (["sweep", "ppo", "--env", "jumanji:Snake-v1", "--torso", "cnn"], "jumanji:Snake-v1 has shape (725,)"),
        (["pbt", "grpo", "--env", "navix:Navix-Empty-5x5-v0", "--num-minibatches", "7"], "group_size * horizon = 3200"),
    ]
    cases += [case for case in suite_cases if catalog.recorded_version_installed(case[0][3])]
    refused_before_jax(cases)


def test_a_count_flag_takes_a_positive_integer_before_jax_starts():
    """A flag that counts (seeds, points, episodes, steps, devices, cores, threads, processes) refuses 0 as it
    parses, in argparse's words, before JAX starts; so does a target return that is not a finite number (it would
    reach summary.json as NaN)."""
    cases = [
        (["sweep", "ppo", "--seeds", "0", "--grid", "gamma=0.9,0.99"], "argument --seeds: '0' is not a count >= 1"),
        (["sweep", "ppo", "--random", "0"], "argument --random: '0' is not a count >= 1"),
        (["sweep", "ppo", "--points-per-program", "0"], "argument --points-per-program: '0' is not a count >= 1"),
        (["train", "ppo", "--cpu-threads", "0"], "argument --cpu-threads: '0' is not a count >= 1"),
        (["train", "ppo", "--cpu-cores", "0"], "argument --cpu-cores: '0' is not a count >= 1"),
        (["pbt", "ppo", "--devices", "0"], "argument --devices: '0' is not a count >= 1"),
        (["eval", "runs/x", "--episodes", "0"], "argument --episodes: '0' is not a count >= 1"),
        (["train", "ppo", "--num-processes", "-1"], "argument --num-processes: '-1' is not a count >= 1"),
        (["render", "runs/x", "--max-steps", "0"], "argument --max-steps: '0' is not a count >= 1"),
        (["train", "ppo", "--target-return", "nan"], "argument --target-return: 'nan' is not a finite number"),
    ]
    refused_before_jax(cases, prefix="jaxrl ")


def test_the_devices_of_one_cpu_process_are_checked_before_jax_starts(tmp_path):
    """Where JAX can only have CPU devices, `jaxrl train`'s --devices and --seed-devices are refused before JAX
    starts in the runner's words (`jaxrl.device_rules`), against the --cpu-cores devices the process will make: a
    count beyond them, a batch they do not divide (a resumed run's own), a device's share that breaks the
    algorithm's rules, a seed split beside a data-parallel one or beyond them; so are `jaxrl sweep`'s and `jaxrl
    pbt`'s --devices beyond them, and a population they do not split."""
    from jaxrl import device_rules

    if not device_rules.cpu_only():
        pytest.skip("an accelerator plugin is installed: the devices wait for JAX")
    run = tmp_path / "run"
    run.mkdir()
    config = {"num_envs": 3, "num_minibatches": 3}
    (run / "config.json").write_text(json.dumps({"algo": "ppo", "config": config, "seeds": 1, "seed": 0}))
    two = ["--cpu-cores", "2"]
    refused_before_jax([
        (["train", "ppo", *two, "--devices", "3"], "devices=3: this process sees 2 device(s) (cpu); on a CPU, make"),
        (["train", "ppo", *two, "--devices", "2", "--num-envs", "5", "--num-minibatches", "5"],
         "Config.num_envs: 5 is not divisible by the 2 devices (each device holds 1/2)"),
        (["train", "ppo", *two, "--devices", "all", "--resume", run], "Config.num_envs: 3 is not divisible by the 2"),
        (["train", "ppo", *two, "--devices", "2", "--core", "gru", "--num-envs", "8", "--num-minibatches", "8"],
         "on each of 2 devices (1/2 of the batch): Config.num_minibatches: 8 does not divide num_envs = 4"),
        (["train", "ppo", *two, "--seed-devices", "3", "--seeds", "4"], "seed_devices=3: this process has 2 device(s)"),
        (["train", "ppo", *two, "--devices", "2", "--seed-devices", "2", "--seeds", "4"], "split either the seeds"),
        (["sweep", "ppo", *two, "--devices", "3", "--grid", "gamma=0.9,0.99"], "--devices 3: this run has 2 device(s)"),
        (["pbt", "ppo", *two, "--devices", "2", "--population", "5", "--explore", "ent_coef=uniform:0:0.1"],
         "PBTConfig.population: 5 members do not split evenly over 2 devices"),
    ])  # fmt: skip


def test_a_presets_values_are_checked_before_jax_starts():
    """Under `--preset` the rules see the preset's values (`jaxrl.presets`, read without JAX), with the flags on
    top: Pendulum-v1's PPO preset takes 32 minibatches, which a batch of 5 x 100 does not divide, and its gamma of
    0.95 lies outside a prior of [0.96, 1]."""
    preset = ["ppo", "--env", "Pendulum-v1", "--preset"]
    small = ["--num-envs", "5", "--num-steps", "100"]
    cases = [
        (["train", *preset, *small], "Config.num_minibatches: 32 does not divide the batch num_envs * num_steps = 500"),
        (["sweep", *preset, *small, "--grid", "gamma=0.9,0.99"], "Config.num_minibatches: 32 does not divide"),
        (["pbt", *preset, "--ready", "100", "--explore", "ent_coef=uniform:0:0.1"], "must be 1 to num_iterations = 97"),
        (["pbt", *preset, "--explore", "gamma=uniform:0.96:1"], "exclude the starting value Config.gamma = 0.95"),
    ]
    refused_before_jax(cases)


def test_a_run_count_out_of_its_range_is_refused_before_jax_starts():
    """`jaxrl train`'s counts (seeds, base seed, chunks, checkpoints, evaluations, seed devices) out of their range
    are refused before JAX starts, in the words `loop.validate_run` uses (`jaxrl.run.options`)."""
    cases = [
        (["train", "ppo", "--seeds", "0"], "seeds=0: need at least one seed."),
        (["train", "dqn", "--chunks", "0"], "num_chunks=0: a number of compiled chunks, >= 1."),
        (["train", "ppo", "--seeds", "2", "--seed-devices", "3"], "seed_devices=3 is more than seeds=2"),
        (["train", "ppo", "--eval-every", "2", "--eval-episodes", "0"], "eval_episodes=0: need at least one episode"),
        (["train", "ppo", "--checkpoint-every", "0"], "checkpoint_every=0: a number of chunks, >= 1"),
    ]
    refused_before_jax(cases)


def test_a_resume_that_changes_its_run_or_a_count_is_refused_before_jax_starts(tmp_path):
    """`jaxrl train --resume RUN` given a setting its run does not have (a Config field, a run setting), or a count
    out of its range with the run's own counts (--chunks, --seed-devices against the run's seeds), is refused
    before JAX starts, in the words the runner uses once it has."""
    run = tmp_path / "run"
    run.mkdir()
    config = {"gamma": 0.99, "num_envs": 8}  # a config.json that predates the other fields: they take their defaults
    (run / "config.json").write_text(json.dumps({"algo": "ppo", "config": config, "seeds": 2, "seed": 0}))
    keeps = f"--resume {run} keeps the run's settings, but"
    cases = [
        (["train", "ppo", "--resume", run, "--gamma", "0.9"], f"{keeps} --gamma 0.9 (the run's: 0.99) differ"),
        (["train", "ppo", "--resume", run, "--hidden-sizes", "32,32"], "--hidden-sizes [32, 32] (the run's: [64, 64])"),
        (
            ["train", "ppo", "--resume", run, "--seeds", "3", "--num-envs", "4"],
            "--num-envs 4 (the run's: 8); --seeds 3 (the run's: 2) differ",
        ),
        (["train", "ppo", "--resume", run, "--eval-every", "2"], "--eval-every 2 (the run's: 0) differ"),
        (["train", "ppo", "--resume", run, "--chunks", "0"], "num_chunks=0: a number of compiled chunks, >= 1."),
        (["train", "ppo", "--resume", run, "--seed-devices", "3"], "seed_devices=3 is more than seeds=2"),
    ]
    refused_before_jax(cases)


def test_a_resumes_settings_read_without_jax_are_the_configs(tmp_path):
    """`folder.check_resume` reads a run's settings from config.json alone (the catalog's defaults for fields it
    predates); they are the ones the Config it resumes holds, and the resume's settings, whatever fields the
    file has."""
    from jaxrl.algos.base import to_dict
    from jaxrl.run import folder

    for config in ({}, {"gamma": 0.9, "hidden_sizes": [32, 32]}, to_dict(ALGORITHMS["dqn"].Config(tau=0.5))):
        (tmp_path / "config.json").write_text(json.dumps({"algo": "dqn", "config": config, "seeds": 3, "seed": 7}))
        saved, stored = folder.check_resume(tmp_path, "dqn", {"seeds": 3, "gamma": config.get("gamma", 0.99)})
        made, settings = folder.resume_settings(tmp_path, "dqn", {})
        assert {k: stored[k] for k in to_dict(made)} == to_dict(made) and made == ALGORITHMS["dqn"].Config(
            **{k: tuple(v) if isinstance(v, list) else v for k, v in config.items()}
        )
        assert settings == {"seeds": 3, "seed": 7, "eval_every": 0, "eval_episodes": 16, "device_independent": False}


def test_a_population_setting_is_refused_before_jax_starts():
    """jaxrl pbt's own flags: an --explore flag that does not read, names an unknown or a static field, or whose
    prior excludes the field's starting value, and a population setting out of its range, are refused before JAX
    starts, in the words `jaxrl.pbt.validate` uses."""
    lr = "learning_rate=loguniform:1e-4:1e-3"
    cases = [
        (["pbt", "ppo"], "PBTConfig.explore: empty; name at least one hyperparameter"),
        (["pbt", "ppo", "--explore", "learning_rate"], "--explore 'learning_rate': expected NAME=KIND:LOW:HIGH"),
        (["pbt", "ppo", "--explore", "lr=uniform:0:1"], "PBTConfig.explore['lr']: Config has no field 'lr'"),
        (["pbt", "dqn", "--explore", "num_envs=int:2:8"], "PBTConfig.explore['num_envs']: a static field"),
        (["pbt", "ppo", "--explore", lr], "bounds [0.0001, 0.001] exclude the starting value Config.learning_rate"),
        (["pbt", "sac", "--explore", "tau=lognormal:0:1"], "PBTConfig.explore['tau']: unknown distribution"),
        (["pbt", "ppo", "--population", "1", "--explore", lr], "PBTConfig.population: got 1, a population needs"),
        (["pbt", "ppo", "--truncation", "0.6", "--explore", lr], "PBTConfig.truncation: got 0.6, which replaces"),
    ]
    refused_before_jax(cases)


@pytest.mark.extended
def test_quiet_leaves_the_summary_alone_on_a_terminal(tmp_path, monkeypatch, capsys):
    """On a terminal `jaxrl train` shows status lines and the progress bar; with --quiet neither: stderr stays
    empty and stdout holds the summary. (--no-progress hides the bar alone: see the cache hit test.)"""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    shown = {}
    for name, flags in {"default": [], "quiet": ["--quiet"]}.items():
        argv = ["train", "ppo", *TINY.split(), "--chunks", "2", "--run-dir", str(tmp_path / name), *flags]
        assert cli.main(argv) == 0
        shown[name] = capsys.readouterr()
    assert "compiling the training program" in shown["default"].err and "%|" in shown["default"].err
    assert shown["quiet"].err == ""
    for name in shown:
        assert "final return" in shown[name].out and f"run folder          {tmp_path / name}" in shown[name].out


def _on_a_terminal(command: list[str], env: dict, timeout_s: float = 900.0) -> tuple[int, str]:
    """(exit status, what it wrote to stderr) of `command` run with stderr a pseudo-terminal, read while it runs
    (so that a full terminal buffer never blocks it) until it exits."""
    import os
    import select
    import subprocess
    import time

    primary, replica = os.openpty()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=replica, env=env)
    os.close(replica)
    chunks, deadline = [], time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if select.select([primary], [], [], 1.0)[0]:
                try:
                    chunk = os.read(primary, 65536)
                except OSError:  # the other end is closed: the process has exited
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        proc.kill()
        os.close(primary)
    return code, b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
def test_a_terminal_hears_the_compile_and_whether_the_cache_held_it(tmp_path):
    """On a terminal, train says it is compiling before the progress bar, then in how many seconds it did. The same
    run twice with one persistent compilation cache: the first compiles its programs and stores them
    (`compilation cache miss`), the second loads them (`compilation cache hit`); without the cache the line names
    neither. Piped, stderr holds no status lines (logs stay clean)."""
    import os
    import subprocess

    env = {**os.environ, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}  # store every program, however quick
    command = [sys.executable, "-m", "jaxrl.cli", "train", "ppo", *TINY.split(), "--chunks", "2"]
    cache = ["--compile-cache", str(tmp_path / "cache")]
    lines = []
    quiet = [*cache, "--no-progress"]
    for name, flags in (("first", quiet), ("second", quiet), ("uncached", ["--compile-cache", "none"])):
        code, shown = _on_a_terminal([*command, *flags, "--run-dir", str(tmp_path / name)], env)
        assert code == 0, shown
        lines.append(next(line for line in shown.splitlines() if "compiled in" in line))
    assert lines[0].endswith("(compilation cache miss)"), lines  # shown with --no-progress: the bar alone is off
    assert lines[1].endswith("(compilation cache hit)"), lines
    assert "cache" not in lines[2], lines
    assert any((tmp_path / "cache").iterdir())
    assert "ppo CartPole-v1: compiling the training program" in shown  # the uncached run, with its progress bar
    assert shown.index("compiling") < shown.index("compiled in")
    piped = subprocess.run([*command, *cache, "--run-dir", str(tmp_path / "pipe")], capture_output=True, text=True,
                           env=env, timeout=900)  # fmt: skip
    assert piped.returncode == 0 and "compiling" not in piped.stderr and "compiled in" not in piped.stderr


def test_a_compile_cache_folder_that_cannot_be_made_is_one_warning(tmp_path, capsys):
    """--compile-cache naming a folder that cannot be made (under a file): one warning line, and the command goes
    on compiling without the persistent cache (JAX's cache folder unchanged)."""
    import argparse

    import jax

    from jaxrl import commands

    blocker = tmp_path / "file"
    blocker.write_text("")
    before = jax.config.jax_compilation_cache_dir
    args = argparse.Namespace(coordinator=None, num_processes=1, process_id=None, cpu_cores=None, cpu_threads=None,
                              compile_cache=str(blocker / "xla"))  # fmt: skip
    commands.start_jax(args, "training")
    warning = f"--compile-cache {blocker / 'xla'}: Not a directory; compiling without the persistent cache"
    assert capsys.readouterr().err == f"jaxrl: warning: {warning}\n"
    assert jax.config.jax_compilation_cache_dir == before
