"""Helpers for algorithm Configs: frozen flax dataclasses whose static fields fix shapes and control flow
and whose hyperparameter fields are pytree leaves (so `jax.vmap` sweeps them without recompiling)."""

import dataclasses
import numbers

from flax import struct

from jaxrl.envs import check_env_id
from jaxrl.networks import ACTIVATIONS


def static(default, help: str):
    """A field baked into the compiled program (shapes, loop counts, env id, switches)."""
    return struct.field(pytree_node=False, default=default, metadata={"help": help})


def hyper(default, help: str):
    """A numeric hyperparameter: a pytree leaf, traced under jit, vmappable in sweeps."""
    return struct.field(pytree_node=True, default=default, metadata={"help": help})


def is_static(field: dataclasses.Field) -> bool:
    return not field.metadata.get("pytree_node", True)


def concrete(value) -> bool:
    """True for a plain Python number (not a tracer or a stacked array), which can be checked on the host."""
    return isinstance(value, numbers.Number)


def check(condition: bool, field: str, message: str) -> None:
    if not condition:
        raise ValueError(f"Config.{field}: {message}")


def check_range(config, field: str, low=None, high=None, low_open=False) -> None:
    value = getattr(config, field)
    if not concrete(value):
        return
    if low is not None:
        ok = value > low if low_open else value >= low
        check(ok, field, f"got {value}, must be {'>' if low_open else '>='} {low}.")
    if high is not None:
        check(value <= high, field, f"got {value}, must be <= {high}.")


def check_common(config, positive_ints: tuple[str, ...], steps_per_iteration: int) -> None:
    """The checks every algorithm's `validate` shares: a registered env id, positive integer fields, at least
    one iteration in `total_timesteps`, and a known activation."""
    check_env_id(config.env)
    for name in positive_ints:
        value = getattr(config, name)
        check(isinstance(value, int) and value >= 1, name, f"got {value!r}, must be a positive integer.")
    check(
        config.total_timesteps // steps_per_iteration >= 1,
        "total_timesteps",
        f"{config.total_timesteps} is less than one iteration (num_envs * num_steps = {steps_per_iteration}).",
    )
    check(
        config.activation in ACTIVATIONS,
        "activation",
        f"{config.activation!r} is not one of {', '.join(ACTIVATIONS)}.",
    )


def check_replay(config, window: int) -> None:
    """The checks a replay-based learner shares: `learning_starts` leaves env steps to learn from, and
    `buffer_size` is a multiple of `num_envs` holding at least `window` steps per env."""
    check(
        isinstance(config.learning_starts, int) and config.learning_starts >= 0,
        "learning_starts",
        f"got {config.learning_starts!r}, must be an integer >= 0.",
    )
    check(
        config.learning_starts < config.num_iterations * config.steps_per_iteration,
        "learning_starts",
        f"{config.learning_starts} leaves no env steps to learn from in total_timesteps={config.total_timesteps}.",
    )
    check(
        config.buffer_size % config.num_envs == 0,
        "buffer_size",
        f"{config.buffer_size} is not a multiple of num_envs={config.num_envs}; "
        f"use e.g. {config.buffer_size // config.num_envs * config.num_envs or config.num_envs}.",
    )
    check(
        config.buffer_size // config.num_envs >= window,
        "buffer_size",
        f"{config.buffer_size} holds fewer than {window} steps per env ({config.num_envs} envs; it needs "
        f"num_steps and any n-step window); make it larger.",
    )


def check_minibatches(config) -> None:
    """The rollout batch num_envs * num_steps must split into `num_minibatches` equal minibatches."""
    batch = config.num_envs * config.num_steps
    check(
        batch % config.num_minibatches == 0,
        "num_minibatches",
        f"{config.num_minibatches} does not divide the batch num_envs * num_steps = "
        f"{config.num_envs} * {config.num_steps} = {batch}; choose a divisor of {batch}.",
    )


def to_dict(config) -> dict:
    return {f.name: _jsonable(getattr(config, f.name)) for f in dataclasses.fields(config)}


def _jsonable(value):
    if isinstance(value, tuple):
        return list(value)
    if hasattr(value, "tolist"):
        return value.tolist()
    return value
