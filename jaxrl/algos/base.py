"""The algorithm protocol, the Config conventions every algorithm shares, its validators, and the ONE generic
`train(config, key)` / `make_train(config)`.

An algorithm is a module with `Config`, `validate`, `setup`, `init`, `update` and `evaluation_policy` (the `Algorithm`
protocol below; a module satisfies a Protocol structurally, PEP 544). `jaxrl.algos` registers each one under its
name (`register`), which is how `train`, the runner and sweeps find the algorithm of a Config: by its class.

Configs are frozen flax dataclasses: fields that fix shapes or control flow are `static` (compiled into the
program); numeric hyperparameters are `hyper` (pytree leaves, traced, vmappable in sweeps). Names keep one
meaning in every Config: `num_envs` parallel environments, `num_steps` steps per environment per iteration,
`env_steps_per_iteration` = num_envs * num_steps, `num_iterations` = total_timesteps // env_steps_per_iteration,
`updates_per_iteration` gradient steps per iteration, `replay_batch_size` a sampled replay batch.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
from collections.abc import Callable
from typing import Any, Protocol

import jax
import numpy as np
from flax import struct

from jaxrl import _compat, config_rules, envs, field_rules, parallel
from jaxrl.config_rules import recurrent  # noqa: F401 (re-exported for the algorithms)
from jaxrl.device_rules import MIN_ENVS_PER_CPU_DEVICE, MIN_SAMPLES_PER_CPU_DEVICE, cpu_data_parallel_pays  # noqa: F401
from jaxrl.envs import check_env_id
from jaxrl.field_rules import check  # noqa: F401 (the validators' `check`, re-exported)

_compat.unroll_threefry_on_cpu()  # the same random bits in every algorithm's program, drawn in fewer kernels

# ---------------------------------------------------------------------------------------------------------
# The protocol and the registry
# ---------------------------------------------------------------------------------------------------------


class Algorithm(Protocol):
    """What every algorithm module provides; `train` and `make_train` come from here, once.

    `setup(config)` builds the static setup of a Config once (the environment, its spec, the networks, the
    optimiser: everything that depends only on static fields); `init`, `update` and `evaluation_policy` take it
    first. Traced hyperparameters stay in `config`, so a vmapped Config still compiles once."""

    Config: type

    def validate(self, config) -> None:
        """Raises a ValueError naming the field and the fix, before anything compiles."""

    def setup(self, config) -> Any:
        """The static setup of `config` (env, networks, optimiser), built once."""

    def init(self, setup, config, key: jax.Array) -> Any:
        """The initial TrainState (a pytree)."""

    def update(self, setup, config, state) -> tuple[Any, dict[str, jax.Array]]:
        """One iteration: (new state, scalar metrics)."""

    def evaluation_policy(self, setup, config, state, deterministic: bool = True) -> tuple[Callable, Callable]:
        """(act(obs, key) -> env action, normalize(obs) -> obs) of the trained policy, for `jaxrl.episodes.evaluate`."""


_BY_CONFIG: dict[type, Algorithm] = {}
_BY_NAME: dict[str, Algorithm] = {}


def register(**algorithms: Algorithm) -> dict[str, Algorithm]:
    """Registers algorithms by name (`register(ppo=ppo_module)`); returns the full name -> algorithm table.
    Each algorithm's Config class must be its own (a subclass is a new algorithm or a variant field)."""
    for name, algo in algorithms.items():
        for member in ("Config", "validate", "setup", "init", "update", "evaluation_policy"):
            if not callable(getattr(algo, member, None)):
                raise TypeError(f"algorithm {name!r} lacks {member}: see jaxrl.algos.base.Algorithm.")
        owner = _BY_CONFIG.get(algo.Config)
        if owner is not None and owner is not algo:
            raise ValueError(f"algorithm {name!r}: its Config class is already registered for another algorithm.")
        _BY_CONFIG[algo.Config] = algo
        _BY_NAME[name] = algo
    return dict(_BY_NAME)


def algorithm_of(config) -> Algorithm:
    """The registered algorithm whose Config class `config` is an instance of (exactly)."""
    algo = _BY_CONFIG.get(type(config))
    if algo is None:
        raise ValueError(
            f"{type(config).__qualname__} is not the Config of a registered algorithm; register yours with "
            "jaxrl.algos.base.register(name=module)."
        )
    return algo


def name_of(algo: Algorithm) -> str:
    """The registered name of `algo` (e.g. "ppo")."""
    for name, registered in _BY_NAME.items():
        if registered is algo:
            return name
    raise ValueError(f"{algo!r} is not a registered algorithm.")


def make_setup(config, algo: Algorithm | None = None):
    """`algo.setup(config)`: the static pieces of `config` (env, networks), built once."""
    algo = algorithm_of(config) if algo is None else algo
    return algo.setup(config)


def initial_state(config, key: jax.Array, setup=None, algo: Algorithm | None = None):
    """`algo.init(setup, config, key)`: the initial TrainState of `config`'s algorithm (`setup` built when None)."""
    algo = algorithm_of(config) if algo is None else algo
    return algo.init(make_setup(config, algo) if setup is None else setup, config, key)


def step(algo: Algorithm, setup, config, state):
    """`algo.update(setup, config, state)`: one iteration (new state, metrics)."""
    return algo.update(setup, config, state)


def evaluation_policy(config, state, deterministic: bool = True, setup=None, algo: Algorithm | None = None):
    """`algo.evaluation_policy(setup, config, state, deterministic)`: (act, normalize) of the trained policy."""
    algo = algorithm_of(config) if algo is None else algo
    setup = make_setup(config, algo) if setup is None else setup
    return algo.evaluation_policy(setup, config, state, deterministic=deterministic)


def iteration(algo: Algorithm, setup, config, state):
    """One `algo.update`, its metrics over every device under data parallelism (`parallel.global_metrics`)."""
    state, metrics = step(algo, setup, config, state)
    return state, parallel.global_metrics(metrics)


def train(config, key: jax.Array):
    """setup + init + `lax.scan` of `update` over `config.num_iterations`: (final TrainState, metrics stacked per
    iteration). Pure in (config, key), so `jax.vmap(train)(stacked_configs, keys)` sweeps hyperparameters."""
    algo = algorithm_of(config)
    setup = make_setup(config, algo)
    state = initial_state(config, key, setup, algo)
    return jax.lax.scan(lambda s, _: iteration(algo, setup, config, s), state, None, length=config.num_iterations)


# algorithms whose every gradient and batch statistic is global over devices (`jaxrl.parallel`); another
# registered algorithm is refused on more than one device
DATA_PARALLEL = (
    *("ppo", "a2c", "reinforce", "impala", "grpo", "dpo", "pqn", "sarsa", "dqn", "ddpg", "td3", "sac"),
    *("trpo", "vmpo"),
)


def data_parallel_config(config, devices):
    """(mesh, per-device Config) of `config` on `devices` (`parallel.resolve_devices`), validated; ValueError
    for an algorithm that is not data-parallel or a field the device count does not divide."""
    algo = algorithm_of(config)
    name = name_of(algo)
    count = devices if isinstance(devices, int) else len(parallel.resolve_devices(devices))
    if count > 1 and name not in DATA_PARALLEL:
        raise ValueError(
            f"devices={count}: {name} is not data-parallel (these are: {', '.join(DATA_PARALLEL)}); "
            "use devices=1 (a sweep over devices shards independent runs instead: jaxrl sweep)."
        )
    mesh = parallel.data_mesh(devices)
    local = parallel.local_config(config, mesh.size)
    try:
        algo.validate(local)
    except ValueError as error:
        raise ValueError(f"on each of {mesh.size} devices (1/{mesh.size} of the batch): {error}") from error
    return mesh, local


def auto_devices(config, seeds: int = 1) -> int:
    """The device count `devices="auto"` trains `config` on: every local device when the algorithm is
    data-parallel, the device count divides its batch and, on a CPU, each device gets enough of it
    (`device_rules.cpu_data_parallel_pays`: `MIN_ENVS_PER_CPU_DEVICE` of the seeds x num_envs environments, or
    `MIN_SAMPLES_PER_CPU_DEVICE` samples of an iteration's rollout); otherwise 1. An accelerator's device takes
    any batch."""
    count = jax.local_device_count()
    if count == 1 or jax.process_count() > 1:
        return 1 if jax.process_count() == 1 else jax.device_count()
    samples = getattr(config, "env_steps_per_iteration", 0)
    if jax.default_backend() == "cpu" and not cpu_data_parallel_pays(config, seeds, count, samples):
        return 1
    try:
        data_parallel_config(config, count)
    except ValueError:
        return 1
    return count


def takes_setup(fn: Callable) -> Callable:
    """Marks `fn(setup, config, ...)`, an algorithm's init or update: called the way it was spelled before setups
    were built once (`init(config, key)`, `update(config, state)`), it raises a TypeError naming the spelling
    that works instead of failing on a missing argument or deep inside."""

    @functools.wraps(fn)
    def checked(setup, *args, **kwargs):
        if isinstance(setup, Config):
            name = "init" if fn.__name__.endswith("init") else "update"
            raise TypeError(
                f"{name}(setup, config, ...) takes the Setup built once per Config first: setup = ALGO.setup(config), "
                f"then ALGO.{name}(setup, config, ...) (got the {type(setup).__name__} first)."
            )
        return fn(setup, *args, **kwargs)

    return checked


def make_train(config, devices=1):
    """Validates `config` and returns the pure `train(key) -> (TrainState, metrics)`, ready to jit/vmap.

    `devices` (a count, "all", a Mesh or a list of devices; default 1): with more than one, ONE policy trains
    data-parallel over them (`jaxrl.parallel`): each device steps num_envs / D envs, gradients and batch
    statistics are averaged; the returned state is device-stacked (leaves [D, ...]). With 1 it is exactly the
    single-device program."""
    algorithm_of(config).validate(config)
    if devices == 1:
        return functools.partial(train, config)
    mesh, local = data_parallel_config(config, devices)
    if mesh.size == 1:
        return functools.partial(train, config)
    return parallel.sharded_train(functools.partial(train, local), mesh)


# ---------------------------------------------------------------------------------------------------------
# Config fields and the properties every Config shares
# ---------------------------------------------------------------------------------------------------------


def static(default, help: str):
    """A field baked into the compiled program (shapes, loop counts, env id, switches)."""
    return struct.field(pytree_node=False, default=default, metadata={"help": help})


def hyper(default, help: str, takes_inf: bool = False):
    """A numeric hyperparameter: a pytree leaf, traced under jit, vmappable in sweeps. With `takes_inf` its value
    may also be inf, which means no limit (`max_grad_norm`: no clipping)."""
    return struct.field(pytree_node=True, default=default, metadata={"help": help, "takes_inf": takes_inf})


# The fields several Configs share: their kind (static or traced) and help text, written once; each Config gives
# its own default.
SHARED_FIELDS = {
    "num_envs": (static, "parallel environments"),
    "num_steps": (static, "rollout length T per iteration, per environment"),
    "total_timesteps": (static, "environment steps of the whole run"),
    "torso": (static, "observation encoder: mlp, or cnn / cnn_large for image observations [H, W, C]"),
    "activation": (static, "hidden activation: tanh, relu, gelu or silu"),
    "optimizer": (static, "optimiser after global-norm clipping: adam, rmsprop or radam"),
    "update_epochs": (static, "passes over each rollout"),
    "num_minibatches": (static, "minibatches per pass; must divide num_envs * num_steps"),
    "anneal_lr": (static, "decay the learning rate linearly to 0 over the run"),
    "core_size": (static, "width of the recurrent core's state (a multiple of 4 for gtrxl)"),
    "learning_rate": (hyper, "learning rate"),
    "gamma": (hyper, "discount factor"),
    "gae_lambda": (hyper, "GAE lambda"),
    "ent_coef": (hyper, "entropy bonus coefficient"),
    "vf_coef": (hyper, "value loss coefficient"),
    "max_grad_norm": (
        functools.partial(hyper, takes_inf=True),
        "global gradient-norm clipping threshold (inf: no clipping)",
    ),
}


def shared(name: str, default):
    """The shared field `name` (SHARED_FIELDS) with this Config's default."""
    kind, help = SHARED_FIELDS[name]
    return kind(default, help)


def core_field(heads: str = "heads"):
    """The recurrent core field (default none) of a network whose core sits between the torso and `heads`."""
    return static("none", f"recurrent core between torso and {heads}: none, gru, lstm, lru or gtrxl")


def is_static(field: dataclasses.Field) -> bool:
    return not field.metadata.get("pytree_node", True)


@struct.dataclass
class Config:
    """The base of every algorithm's Config: the env and the run's length, and the derived counts.

    Subclasses declare `num_envs` and `num_steps` (as fields, or as properties as GRPO does)."""

    env: str = static("CartPole-v1", "gymnax environment id")
    total_timesteps: int = static(200_000, "environment steps of the whole run (per seed)")

    @property
    def env_steps_per_iteration(self) -> int:
        """Environment steps of one iteration: num_envs * num_steps."""
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        """Iterations of the run: total_timesteps // env_steps_per_iteration."""
        return self.total_timesteps // self.env_steps_per_iteration


def to_dict(config) -> dict:
    return {f.name: _jsonable(getattr(config, f.name)) for f in dataclasses.fields(config)}


def _jsonable(value):
    if isinstance(value, tuple):
        return list(value)
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


# ---------------------------------------------------------------------------------------------------------
# Validators: each raises ValueError("Config.<field>: <what is wrong and the fix>")
# ---------------------------------------------------------------------------------------------------------


def concrete(value) -> bool:
    """True for a plain Python number (not a tracer or a stacked array), which can be checked on the host."""
    return isinstance(value, numbers.Number)


def host_array(value):
    """`value` as a NumPy array when it is known on the host: a Python or NumPy number, a NumPy array or a
    concrete `jax.Array` (e.g. `jnp.float32(-1)`); None for a tracer (a Config traced under jit or vmap)."""
    if isinstance(value, jax.core.Tracer):
        return None
    if isinstance(value, (numbers.Number, np.generic, np.ndarray, jax.Array)):
        return np.asarray(value)
    return None


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_fields(config) -> None:
    """The type of every field, from its default, then its rule (`jaxrl.field_rules`: a range, an integer's
    minimum or its choices, by the field's name). A `hyper` field holds one finite real number (a Python or NumPy
    number, or a concrete array of shape (); a tracer passes when its shape is ()); a `static` field holds a value
    of its default's type (int, float, bool, str), finite when a float, and tuples of ints (`hidden_sizes`) hold
    positive integers."""
    for field in dataclasses.fields(config):
        name, value, default = field.name, getattr(config, field.name), field.default
        if not is_static(field):
            shape = getattr(value, "shape", ())
            check(
                shape == (),
                name,
                f"got an array of shape {tuple(shape)}, must be a scalar (shape ()): a Config is one run's; sweep "
                "values with jaxrl.sweep.grid or jax.vmap over stacked Configs.",
            )
            if isinstance(value, jax.core.Tracer):
                continue
            values = host_array(value)
            real = values is not None and values.dtype.kind in "iuf" and not isinstance(value, bool)
            check(real, name, f"got {value!r} ({type(value).__name__}), must be a real number.")
            takes_inf = field.metadata.get("takes_inf", False)
            finite = np.isfinite(values) | (takes_inf & (values == np.inf))
            check(
                bool(finite.all()),
                name,
                f"got {field_rules.shown(values)}, must be a finite number{' or inf' * takes_inf}.",
            )
            field_rules.check_value(name, values)
            continue
        if isinstance(default, bool):
            check(isinstance(value, (bool, np.bool_)), name, f"got {value!r}, must be true or false.")
        elif isinstance(default, int):
            check(_is_int(value), name, f"got {value!r} ({type(value).__name__}), must be an integer.")
        elif isinstance(default, float):
            ok = isinstance(value, (numbers.Real, np.floating)) and not isinstance(value, bool)
            check(ok and np.isfinite(value), name, f"got {value!r}, must be a finite number.")
        elif isinstance(default, str):
            check(isinstance(value, str), name, f"got {value!r} ({type(value).__name__}), must be a string.")
        elif isinstance(default, tuple) and all(_is_int(x) for x in default):
            field_rules.check_positive_ints(name, value)
        field_rules.check_value(name, value)


def env_facts(env_id: str) -> config_rules.EnvFacts:
    """What `jaxrl.config_rules` needs of the env `env_id` (one copy of it made): its observation shape, whether its
    actions are discrete, and its time limit (`max_steps_in_episode`; None where it has none)."""
    env = envs.make(env_id, 1)
    limit = getattr(getattr(env, "params", None), "max_steps_in_episode", None)
    limit = int(limit) if isinstance(limit, (int, np.integer)) and limit >= 1 else None
    return config_rules.EnvFacts(tuple(env.spec.observation_shape), bool(env.spec.discrete), limit)


def check_common(config, rules) -> None:
    """The checks every algorithm's `validate` makes: `check_fields` (each field's type and rule), a registered env
    id, then `rules` (the algorithm's entry in `jaxrl.config_rules.BY_ALGORITHM`: the fields together and with the
    env's facts, `env_facts`)."""
    check_fields(config)
    check_env_id(config.env)
    rules(config, env_facts(config.env))
