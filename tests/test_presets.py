"""Presets: tuned (algorithm, env) Configs kept as TOML data in the package (`jaxrl/presets/<algo>.toml`) and shared
by the CLI, the scorecard and user code."""

import dataclasses
import json
import math
from pathlib import Path

import pytest

from jaxrl import cli, presets
from jaxrl.algos import ALGORITHMS
from jaxrl.presets import tomllib  # tomllib, or tomli before Python 3.11

ROOT = Path(__file__).resolve().parents[1]

# A frozen copy of the presets' values: the data files must give exactly these (types included).
_MINATAR = ("Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "Seaquest-MinAtar", "SpaceInvaders-MinAtar")
_MINATAR_PPO = {
    "num_envs": 64,
    "num_steps": 128,
    "learning_rate": 0.0005,
    "anneal_lr": False,
    "update_epochs": 4,
    "num_minibatches": 8,
    "gamma": 0.999,
    "hidden_sizes": (256, 256),
    "activation": "relu",
}
_MINATAR_PQN = {
    "num_envs": 128,
    "num_steps": 32,
    "update_epochs": 2,
    "num_minibatches": 32,
    "learning_rate": 0.0005,
    "q_lambda": 0.65,
    "epsilon_end": 0.05,
    "epsilon_decay_fraction": 0.1,
    "reward_scale": 1.0,
    "hidden_sizes": (256, 256),
}
_MEMORY = {
    "core": "gru",
    "core_size": 64,
    "num_envs": 32,
    "num_steps": 24,
    "num_minibatches": 4,
    "learning_rate": 0.001,
}
FROZEN = {
    ("ppo", "Acrobot-v1"): {"update_epochs": 8},
    ("grpo", "CartPole-v1"): {"learning_rate": 0.0005},
    ("grpo", "Acrobot-v1"): {"learning_rate": 0.002},
    ("reinforce", "CartPole-v1"): {"learning_rate": 0.002},
    ("impala", "CartPole-v1"): {"update_epochs": 2, "learning_rate": 0.0005},
    ("dqn", "MountainCar-v0"): {
        "num_envs": 8,
        "num_steps": 8,
        "buffer_size": 50000,
        "updates_per_iteration": 8,
        "learning_rate": 0.0005,
        "target_update_interval": 5,
        "double": True,
        "n_step": 3,
        "td_loss": "huber",
        "layer_norm": True,
    },
    ("pqn", "CartPole-v1"): {"epsilon_end": 0.01},
    ("sarsa", "CartPole-v1"): {"epsilon_end": 0.01},
    ("dpo", "Acrobot-v1"): {"learning_rate": 0.0005},
    ("ppo", "Pendulum-v1"): {
        "normalize_observations": True,
        "num_envs": 16,
        "num_steps": 128,
        "update_epochs": 10,
        "num_minibatches": 32,
        "learning_rate": 0.001,
        "gamma": 0.95,
        "gae_lambda": 0.9,
        "ent_coef": 0.0,
    },
    ("trpo", "Pendulum-v1"): {
        "num_envs": 8,
        "num_steps": 256,
        "gamma": 0.9,
        "max_kl": 0.02,
        "vf_epochs": 10,
        "normalize_observations": True,
    },
    ("ppo", "MountainCar-v0"): {
        "normalize_observations": True,
        "num_envs": 16,
        "num_steps": 16,
        "gae_lambda": 0.98,
        "ent_coef": 0.0,
        "update_epochs": 4,
        "num_minibatches": 4,
        "learning_rate": 0.001,
    },
    ("ppo", "MountainCarContinuous-v0"): {"normalize_observations": True},
    ("a2c", "Pendulum-v1"): {
        "bound_mean": True,
        "normalize_rewards": True,
        "normalize_observations": True,
        "gamma": 0.9,
        "advantage": "gae",
        "gae_lambda": 0.9,
        "num_envs": 8,
        "num_steps": 8,
        "learning_rate": 0.001,
        "optimizer": "adam",
        "normalize_advantages": True,
    },
    ("impala", "Pendulum-v1"): {
        "bound_mean": True,
        "normalize_advantages": True,
        "normalize_observations": True,
        "normalize_rewards": True,
        "gamma": 0.9,
        "num_envs": 8,
        "num_steps": 8,
        "num_minibatches": 1,
        "behaviour_lag": 1,
        "ent_coef": 0.0,
        "max_grad_norm": 100.0,
    },
    ("reinforce", "Pendulum-v1"): {"normalize_observations": True, "normalize_rewards": True},
    ("vmpo", "Pendulum-v1"): {
        "normalize_observations": True,
        "num_steps": 128,
        "update_epochs": 10,
        "num_minibatches": 32,
        "learning_rate": 0.001,
        "gamma": 0.95,
        "gae_lambda": 0.9,
    },
    ("grpo", "Pendulum-v1"): {"learning_rate": 0.001, "update_epochs": 10, "num_minibatches": 32},
    ("grpo", "MountainCarContinuous-v0"): {"learning_rate": 0.001, "update_epochs": 10, "num_minibatches": 32},
    ("ppo", "MemoryChain-bsuite"): dict(_MEMORY),
    ("pqn", "MemoryChain-bsuite"): {**_MEMORY, "reward_scale": 1.0},
    ("impala", "MemoryChain-bsuite"): {**_MEMORY, "update_epochs": 2},
    **{("ppo", env): dict(_MINATAR_PPO) for env in _MINATAR},
    **{("pqn", env): dict(_MINATAR_PQN) for env in _MINATAR},
}


def test_the_data_files_give_exactly_the_frozen_values():
    assert presets.available() == sorted(FROZEN)
    for (algo, env), frozen in FROZEN.items():
        values = presets.overrides(algo, env)
        assert values == frozen, (algo, env)
        for field, value in frozen.items():
            assert type(values[field]) is type(value), (algo, env, field)  # a tuple stays a tuple, an int an int
        assert presets.get(algo, env) == ALGORITHMS[algo].Config(env=env, **frozen)


@pytest.mark.parametrize("algo, env", presets.available())
def test_every_preset_is_a_valid_config_of_its_algorithm(algo, env):
    config = presets.get(algo, env)
    assert type(config) is ALGORITHMS[algo].Config and config.env == env
    for field, value in presets.PRESETS[algo, env].items():
        assert getattr(config, field) == value, field
    ALGORITHMS[algo].validate(config)  # raises if the preset cannot run


def test_get_applies_changes_on_top_and_defaults_without_a_preset():
    config = presets.get("ppo", "Pendulum-v1", total_timesteps=12_345, learning_rate=3e-4)
    assert config.total_timesteps == 12_345 and config.learning_rate == 3e-4 and config.num_minibatches == 32
    plain = presets.get("dqn", "CartPole-v1")
    assert plain == ALGORITHMS["dqn"].Config(env="CartPole-v1")
    assert presets.overrides("dqn", "CartPole-v1") == {} and presets.result("dqn", "CartPole-v1") is None
    with pytest.raises(ValueError, match="not one of"):
        presets.get("ppo2", "CartPole-v1")


def test_the_files_are_plain_toml_one_per_algorithm_and_ship_with_the_package():
    files = sorted(presets.DIRECTORY.glob("*.toml"))
    assert {path.stem for path in files} == {algo for algo, _ in FROZEN}
    for path in files:
        data = tomllib.loads(path.read_text())  # readable without jaxrl
        assert all(isinstance(table, dict) for table in data.values())
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "*.toml" in pyproject["tool"]["setuptools"]["package-data"]["jaxrl.presets"]


def _recorded_rows() -> dict:
    """(file, algo, env) -> the row of a results JSON, for the results files the presets cite."""
    rows = {}
    for name in ("scorecard", "minatar"):
        for row in json.loads((ROOT / "benchmarks" / "results" / f"{name}.json").read_text())["rows"]:
            rows[f"benchmarks/results/{name}.md", row["algo"], row["env"]] = row
    return rows


@pytest.mark.parametrize("algo, env", presets.available())
def test_each_result_names_an_existing_file_and_agrees_with_it(algo, env):
    result = presets.result(algo, env)
    if result is None:
        assert env == "Seaquest-MinAtar"  # the one preset not measured yet
        return
    assert (ROOT / result["file"]).is_file(), result["file"]
    assert result["seeds"] >= 1 and result["evaluation_episodes"] >= 1
    if "test" in result:
        test_file, _, name = result["test"].partition("::")
        assert f"def {name}(" in (ROOT / test_file).read_text()
    row = _recorded_rows().get((result["file"], algo, env))
    if row is None:
        return
    # the figures are the results row as its table prints them (one decimal), and the row ran this config
    assert (result["seeds"], result["budget"], result["env_steps"]) == (row["seeds"], row["budget"], row["env_steps"])
    assert result["evaluation_return"] == round(row["eval_mean"], 1)
    assert result["evaluation_ci"] == [round(x, 1) for x in row["eval_ci"]]
    if math.isfinite(row["final_mean"]):
        assert result["training_return"] == round(row["final_mean"], 1)
        assert result["training_ci"] == [round(x, 1) for x in row["final_ci"]]
    else:
        assert "training_return" not in result
    for field, value in presets.overrides(algo, env).items():
        assert row["config"][field] == (list(value) if isinstance(value, tuple) else value), field


def test_the_scorecard_uses_the_presets():
    from benchmarks import scorecard

    _, config = scorecard.make_config("ppo", "MountainCar-v0", 100_000)
    assert config == dataclasses.replace(presets.get("ppo", "MountainCar-v0"), total_timesteps=100_000)
    _, replay = scorecard.make_config("grpo-replay", "Pendulum-v1", 100_000)
    assert replay.replay_ratio == 1 and replay.update_epochs == presets.PRESETS["grpo", "Pendulum-v1"]["update_epochs"]


# ---------------------------------------------------------------------------------------------------------
# The loader: types, and one-line errors naming the file and the field
# ---------------------------------------------------------------------------------------------------------


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    return path


def test_the_loader_types_values_as_the_config_defaults(tmp_path):
    write(
        tmp_path,
        "ppo.toml",
        "[CartPole-v1]\nlearning_rate = 1\nhidden_sizes = [32, 32]\nnum_envs = 8\nanneal_lr = false\n"
        'activation = "relu"\n\n[CartPole-v1.result]\nfile = "x.md"\nseeds = 2\n',
    )
    (preset,) = presets.load(tmp_path).values()
    assert (preset.algo, preset.env, preset.result) == ("ppo", "CartPole-v1", {"file": "x.md", "seeds": 2})
    assert preset.fields == {
        "learning_rate": 1.0,
        "hidden_sizes": (32, 32),
        "num_envs": 8,
        "anneal_lr": False,
        "activation": "relu",
    }
    assert type(preset.fields["learning_rate"]) is float and type(preset.fields["hidden_sizes"]) is tuple


@pytest.mark.parametrize(
    "name, text, where",
    [
        ("ppo.toml", "[CartPole-v1]\nlearning_rate = \n", "not valid TOML"),
        ("ppo.toml", "[CartPole-v1]\nlearning_rat = 1e-3\n", "[CartPole-v1] learning_rat"),
        ("ppo.toml", '[CartPole-v1]\nnum_envs = "8"\n', "[CartPole-v1] num_envs"),
        ("ppo.toml", "[CartPole-v1]\nnum_envs = 8.0\n", "[CartPole-v1] num_envs"),
        ("ppo.toml", "[CartPole-v1]\nanneal_lr = 1\n", "[CartPole-v1] anneal_lr"),
        ("ppo.toml", "[CartPole-v1]\nhidden_sizes = 64\n", "[CartPole-v1] hidden_sizes"),
        ("ppo.toml", '[CartPole-v1]\nenv = "Acrobot-v1"\n', "[CartPole-v1] env"),
        ("ppo.toml", "learning_rate = 1e-3\n", "learning_rate"),
        ("ppo.toml", "[CartPole-v1]\n[CartPole-v1.result]\nseed = 8\n", "[CartPole-v1.result] seed"),
        ("ppo.toml", '[CartPole-v1]\n[CartPole-v1.result]\nseeds = "8"\n', "[CartPole-v1.result] seeds"),
        ("ppo.toml", "[CartPole-v1]\nresult = 3\n", "[CartPole-v1] result"),
        ("ppo2.toml", "[CartPole-v1]\nlearning_rate = 1e-3\n", "file name"),
    ],
)
def test_a_bad_file_is_a_one_line_error_naming_the_file_and_the_field(tmp_path, name, text, where):
    path = write(tmp_path, name, text)
    with pytest.raises(ValueError) as error:
        presets.load(tmp_path)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{path}: {where}"), message


def test_reading_the_presets_imports_no_jax():
    """The command line reads a preset's values before JAX starts: `jaxrl.presets` types them by the catalog's
    defaults, so loading every file, in a fresh process, imports neither JAX nor an algorithm; `get` does."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom jaxrl import presets\n"
        "print(len(presets.load()), presets.overrides('ppo', 'Pendulum-v1')['num_minibatches'])\n"
        "print(sorted(m for m in sys.modules if m == 'jax' or m.startswith(('jax.', 'jaxrl.algos'))))\n"
        "presets.get('ppo', 'Pendulum-v1')\nprint('jaxrl.algos.ppo' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.stdout.split() == [str(len(presets.PRESETS)), "32", "[]", "True"], done.stdout + done.stderr


def test_the_package_files_load_with_the_public_loader():
    loaded = presets.load()
    assert {key: preset.fields for key, preset in loaded.items()} == presets.PRESETS
    assert all(preset.path.parent == presets.DIRECTORY for preset in loaded.values())


# ---------------------------------------------------------------------------------------------------------
# The CLI's --preset
# ---------------------------------------------------------------------------------------------------------


def test_the_cli_preset_flag_gives_the_data_files_config():
    from jaxrl.algos import ppo

    args = cli.build_parser().parse_args(["train", "ppo", "--env", "Breakout-MinAtar", "--preset", "--gamma", "0.99"])
    config = cli.config_from_args(ppo.Config, args)
    assert config == ppo.Config(env="Breakout-MinAtar", **{**_MINATAR_PPO, "gamma": 0.99})
    assert config.hidden_sizes == (256, 256) and type(config.hidden_sizes) is tuple


@pytest.mark.slow  # compiles a (tiny) run: a minute on a loaded 2-core machine
def test_jaxrl_train_with_a_preset_runs_and_records_its_config(tmp_path, capsys):
    run = tmp_path / "run"
    tiny = "--num-envs 4 --num-steps 16 --total-timesteps 128 --update-epochs 1 --num-minibatches 2"
    flags = f"{tiny} --hidden-sizes 16,16 --chunks 1 --no-progress --run-dir {run}"
    assert cli.main(["train", "ppo", "--env", "MountainCarContinuous-v0", "--preset", *flags.split()]) == 0
    config = json.loads((run / "config.json").read_text())["config"]
    assert config["normalize_observations"] is True  # the preset
    assert config["num_envs"] == 4 and config["hidden_sizes"] == [16, 16]  # the flags on top
