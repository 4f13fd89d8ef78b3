"""The rules a Config keeps across its fields: a run of one iteration at least, a minibatch count that divides the
rollout batch, a replay buffer that holds a window per env, a core's width that splits into its heads. One field
alone keeps its rule in `jaxrl.field_rules`; what needs the env (its action space, its observation shape, its time
limit) stays in each algorithm's `validate`.

The rules import nothing of JAX and read a Config's fields as attributes. Each algorithm's `validate` checks its
Config with its entry in `BY_ALGORITHM` once JAX has started, and `jaxrl train`, `sweep` and `pbt` check the
values their flags give (`Values`) with the same entry before it starts, so a refusal reads the same either way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from jaxrl.field_rules import check, check_int

GTRXL_HEADS = 4  # the attention heads of jaxrl's GTrXL core (`jaxrl.networks.gtrxl`)
ROLLOUT = "num_envs * num_steps"


class Unknown(Exception):
    """A count the rules need that only the env can give (a GRPO horizon of 0: the env's time limit)."""


class Values:
    """A Config's field values (`fields`, every field by name) as attributes, with the counts a Config derives:
    `num_envs` and `num_steps` of a grouped learner (M * G members, `horizon` steps; `Unknown` when the horizon is
    the env's time limit), `env_steps_per_iteration` and `num_iterations`."""

    def __init__(self, fields: dict):
        self.__dict__.update(fields)

    def __getattr__(self, name: str):
        fields = self.__dict__
        if name == "num_envs" and "num_groups" in fields:
            return fields["num_groups"] * fields["group_size"]
        if name == "num_steps" and "horizon" in fields:
            if not fields["horizon"]:
                raise Unknown("num_steps")
            return fields["horizon"]
        if name == "env_steps_per_iteration":
            return self.num_envs * self.num_steps
        if name == "num_iterations":
            return fields["total_timesteps"] // self.env_steps_per_iteration
        raise AttributeError(name)


def recurrent(config) -> bool:
    """Whether the Config names a recurrent core (a Config without a `core` field is feedforward)."""
    return getattr(config, "core", "none") != "none"


def check_iterations(config) -> None:
    """`total_timesteps` holds one iteration at least."""
    check(
        config.total_timesteps // config.env_steps_per_iteration >= 1,
        "total_timesteps",
        f"{config.total_timesteps} is less than one iteration (num_envs * num_steps = "
        f"{config.env_steps_per_iteration}).",
    )


def check_divides(config, field: str, what: str = ROLLOUT) -> None:
    """`field` (a minibatch count) divides the rollout batch `what` (num_envs * num_steps)."""
    batch, parts = config.env_steps_per_iteration, getattr(config, field)
    check(
        batch % parts == 0,
        field,
        f"{parts} does not divide the batch {what} = {batch}; choose a divisor of {batch}.",
    )


def check_replay(config, window: int) -> None:
    """`learning_starts` leaves env steps to learn from, and `buffer_size` is a multiple of `num_envs` holding at
    least `window` steps per env."""
    check(
        config.learning_starts < config.num_iterations * config.env_steps_per_iteration,
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


def check_core(config) -> None:
    """A GTrXL core's width splits into its heads, and a recurrent learner's `num_minibatches` (where it has one)
    divides `num_envs`: its minibatches are whole environment sequences."""
    if config.core == "gtrxl":
        check(
            config.core_size % GTRXL_HEADS == 0,
            "core_size",
            f"{config.core_size} is not a multiple of {GTRXL_HEADS}: core='gtrxl' splits its width into "
            f"{GTRXL_HEADS} attention heads; choose e.g. 64 or 128.",
        )
    if recurrent(config) and hasattr(config, "num_minibatches"):
        check(
            config.num_envs % config.num_minibatches == 0,
            "num_minibatches",
            f"{config.num_minibatches} does not divide num_envs = {config.num_envs}; with core={config.core!r} a "
            "minibatch is a set of whole environment sequences: choose a divisor of num_envs.",
        )


# ---------------------------------------------------------------------------------------------------------
# Each family's and algorithm's rules
# ---------------------------------------------------------------------------------------------------------


def actor_critic(config, minibatches: str | None = "num_minibatches", what: str = ROLLOUT) -> None:
    """One iteration at least, `minibatches` (unless None) divides the rollout batch `what`, the core's rules, and
    `bound_mean` only on the MLP policy."""
    check_iterations(config)
    if minibatches is not None:
        check_divides(config, minibatches, what)
    if hasattr(config, "core"):
        check_core(config)
    if getattr(config, "bound_mean", False) and recurrent(config):
        raise ValueError("bound_mean=True applies to the MLP policy only; set core='none' or bound_mean=False.")


trpo = functools.partial(actor_critic, minibatches="vf_minibatches")
full_batch = functools.partial(actor_critic, minibatches=None)  # one gradient step on the whole rollout


def reinforce(config) -> None:
    """The family's rules; whole episodes reset the envs, so not with observation statistics."""
    actor_critic(config)
    check(
        not (config.whole_episodes and config.normalize_observations),
        "normalize_observations",
        "whole_episodes resets the envs every iteration, which would reset the observation statistics too; "
        "turn one of them off.",
    )


def impala(config) -> None:
    """The family's rules; a recurrent core only with the V-trace critic."""
    actor_critic(config)
    check(
        config.core == "none" or config.critic == "value",
        "core",
        f"core={config.core!r} is built for the V-trace critic; use critic='value' or core='none'.",
    )


def _group_size(config) -> None:
    check(config.group_size >= 2, "group_size", f"got {config.group_size}; a group needs at least 2 members.")


def grpo(config) -> None:
    """Two members a group at least, and the family's rules over the groups' batch M * G * horizon."""
    _group_size(config)
    actor_critic(config, what="num_groups * group_size * horizon")


def dpo(config) -> None:
    """Two members a group at least, and the family's rules without minibatches (full-batch steps)."""
    _group_size(config)
    full_batch(config)


def q_learning(config) -> None:
    """One iteration at least."""
    check_iterations(config)


def q_lambda(config) -> None:
    """One iteration at least, and `num_minibatches` divides the rollout batch."""
    check_iterations(config)
    check_divides(config, "num_minibatches")


def pqn(config) -> None:
    """The lambda-return rules and the core's."""
    q_lambda(config)
    check_core(config)


def dqn_window(config) -> int:
    """Steps a replayed sample spans: `n_step`, or with a core `sequence_length`."""
    return config.sequence_length if recurrent(config) else config.n_step


def dqn(config) -> None:
    """One iteration at least, a TD target of one step at least, the core's rules, a burn-in shorter than the
    sequence, and a buffer that holds a rollout and a replayed window per env."""
    check_iterations(config)
    check_int("n_step", config.n_step, 1)  # a TD target bootstraps after one step at least
    check_core(config)
    if recurrent(config):
        check(
            config.burn_in < config.sequence_length,
            "burn_in",
            f"{config.burn_in} leaves no step to learn from in sequence_length={config.sequence_length}; make "
            "sequence_length longer than burn_in.",
        )
    check_replay(config, max(config.num_steps, dqn_window(config)))


def off_policy(config) -> None:
    """One iteration at least and a buffer that holds a rollout per env."""
    check_iterations(config)
    check_replay(config, config.num_steps)


BY_ALGORITHM: dict[str, Callable] = {
    "a2c": actor_critic,
    "ppo": actor_critic,
    "vmpo": actor_critic,
    "trpo": trpo,
    "reinforce": reinforce,
    "impala": impala,
    "grpo": grpo,
    "dpo": dpo,
    "dqn": dqn,
    "sarsa": q_lambda,
    "pqn": pqn,
    "ddpg": off_policy,
    "td3": off_policy,
    "sac": off_policy,
}


def num_iterations(fields: dict) -> int | None:
    """The run's iterations from its field values (`fields`), or None where only the env can give them."""
    try:
        return Values(fields).num_iterations
    except Unknown:
        return None


def check_values(algorithm: str, fields: dict) -> None:
    """Refuses, in the words of the algorithm's `validate`, field values (`fields`: every field of `algorithm`'s
    Config by name) that break its rules; passes an algorithm without an entry, and a rule that needs a count only
    the env gives."""
    rules = BY_ALGORITHM.get(algorithm)
    if rules is None:
        return
    try:
        rules(Values(fields))
    except Unknown:
        pass
