"""The rules a Config keeps across its fields and with its env: a run of one iteration at least, a minibatch count
that divides the rollout batch, a replay buffer that holds a window per env, a core's width that splits into its
heads, an image torso on image observations, the action space the algorithm learns. One field alone keeps its rule
in `jaxrl.field_rules`.

The rules import nothing of JAX: they read a Config's fields as attributes and the env as `EnvFacts` (its
observation shape, whether its actions are discrete, its time limit). Each algorithm's `validate` checks its Config
with its entry in `BY_ALGORITHM` once JAX has started, with the facts of the env it makes; `jaxrl train`, `sweep`
and `pbt` check the values their flags give (`Values`) with the same entry before it starts, with the facts
`jaxrl/env_ids.json` records (gymnax's, jaxrl's own, and each suite's for the suite version recorded; none for an
env an `--env-module` registers, or one that needs a download: those rules wait for `validate`). So a refusal reads
the same either way.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from jaxrl.field_rules import check, check_int

GTRXL_HEADS = 4  # the attention heads of jaxrl's GTrXL core (`jaxrl.networks.gtrxl`)
ROLLOUT = "num_envs * num_steps"


@dataclasses.dataclass(frozen=True)
class EnvFacts:
    """What the rules need of an env: its observation shape, whether its actions are discrete, and its time limit
    (`max_steps_in_episode`; None where it has none)."""

    observation_shape: tuple[int, ...]
    discrete: bool
    time_limit: int | None = None


class Unknown(Exception):
    """A count the rules need that only the env can give (a GRPO horizon of 0: the env's time limit)."""


class Values:
    """A Config's field values (`fields`, every field by name) as attributes, with the counts a Config derives:
    `num_envs` and `num_steps` of a grouped learner (M * G members, `horizon` steps, or the time limit of `env`
    when the horizon is 0; `Unknown` where no facts give it), `env_steps_per_iteration` and `num_iterations`."""

    def __init__(self, fields: dict, env: EnvFacts | None = None):
        self.__dict__.update(fields)
        self._env = env

    def __getattr__(self, name: str):
        fields = self.__dict__
        if name == "num_envs" and "num_groups" in fields:
            return fields["num_groups"] * fields["group_size"]
        if name == "num_steps" and "horizon" in fields:
            if not fields["horizon"]:
                if self._env is None or self._env.time_limit is None:
                    raise Unknown("num_steps")
                return self._env.time_limit
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


def check_action_space(config, discrete: bool, wanted: bool, algorithm: str) -> None:
    """The env's action space must be discrete (`wanted`=True) or continuous (False) for `algorithm`."""
    if discrete == wanted:
        return
    if wanted:
        hint = f"{algorithm} needs a discrete action space (e.g. CartPole-v1)"
    else:
        hint = f"{algorithm} needs continuous (Box) actions, e.g. Pendulum-v1 or MountainCarContinuous-v0"
    kind = "discrete" if discrete else "continuous"
    check(False, "env", f"{config.env} has {kind} actions; {hint}.")


def check_torso(config, observation_shape) -> None:
    """An image torso gets image observations [H, W, C] (`field_rules` checks that `torso` is known)."""
    check(
        config.torso == "mlp" or len(observation_shape) == 3,
        "torso",
        f"{config.torso!r} needs image observations [H, W, C]; {config.env} has shape {tuple(observation_shape)}: "
        "use torso='mlp'.",
    )


# ---------------------------------------------------------------------------------------------------------
# Each family's and algorithm's rules: (config, the env's facts or None) -> None
# ---------------------------------------------------------------------------------------------------------


def actor_critic(config, env: EnvFacts | None, minibatches: str | None = "num_minibatches", what: str = ROLLOUT):
    """One iteration at least, `minibatches` (unless None) divides the rollout batch `what`, the core's rules,
    `bound_mean` only on the MLP policy, and a torso that fits the env's observations."""
    check_iterations(config)
    if minibatches is not None:
        check_divides(config, minibatches, what)
    if hasattr(config, "core"):
        check_core(config)
    if getattr(config, "bound_mean", False) and recurrent(config):
        raise ValueError("bound_mean=True applies to the MLP policy only; set core='none' or bound_mean=False.")
    if env is not None:
        check_torso(config, env.observation_shape)


trpo = functools.partial(actor_critic, minibatches="vf_minibatches")
full_batch = functools.partial(actor_critic, minibatches=None)  # one gradient step on the whole rollout


def reinforce(config, env: EnvFacts | None) -> None:
    """The family's rules; whole episodes reset the envs, so not with observation statistics."""
    actor_critic(config, env)
    check(
        not (config.whole_episodes and config.normalize_observations),
        "normalize_observations",
        "whole_episodes resets the envs every iteration, which would reset the observation statistics too; "
        "turn one of them off.",
    )


def impala(config, env: EnvFacts | None) -> None:
    """The family's rules; a recurrent core only with the V-trace critic, and the Retrace critic on discrete
    actions."""
    actor_critic(config, env)
    if env is not None and config.critic == "q":
        check(
            env.discrete,
            "critic",
            f"critic='q' needs discrete actions; {config.env} is continuous: use critic='value'.",
        )
    check(
        config.core == "none" or config.critic == "value",
        "core",
        f"core={config.core!r} is built for the V-trace critic; use critic='value' or core='none'.",
    )


def _group_size(config) -> None:
    check(config.group_size >= 2, "group_size", f"got {config.group_size}; a group needs at least 2 members.")


def grpo(config, env: EnvFacts | None) -> None:
    """Two members a group at least, and the family's rules over the groups' batch M * G * horizon."""
    _group_size(config)
    actor_critic(config, env, what="num_groups * group_size * horizon")


def dpo(config, env: EnvFacts | None) -> None:
    """Two members a group at least, and the family's rules without minibatches (full-batch steps)."""
    _group_size(config)
    full_batch(config, env)


def _q_env(config, env: EnvFacts | None, algorithm: str) -> None:
    """A Q-learner's env: discrete actions (`algorithm` names the learner in the message), and observations its
    torso fits."""
    if env is not None:
        check_action_space(config, env.discrete, True, algorithm)
        check_torso(config, env.observation_shape)


def q_learning(config, env: EnvFacts | None, algorithm: str = "Q-learning") -> None:
    """One iteration at least, and the Q-learner's env (the family's default)."""
    check_iterations(config)
    _q_env(config, env, algorithm)


def q_lambda(config, env: EnvFacts | None, algorithm: str = "SARSA") -> None:
    """One iteration at least, `num_minibatches` divides the rollout batch, and the Q-learner's env."""
    check_iterations(config)
    check_divides(config, "num_minibatches")
    _q_env(config, env, algorithm)


def sarsa(config, env: EnvFacts | None) -> None:
    """The lambda-return rules, for SARSA or Expected SARSA."""
    q_lambda(config, env, "Expected SARSA" if config.expected is True else "SARSA")


def pqn(config, env: EnvFacts | None) -> None:
    """The lambda-return rules and the core's."""
    q_lambda(config, env, "PQN")
    check_core(config)


def dqn_window(config) -> int:
    """Steps a replayed sample spans: `n_step`, or with a core `sequence_length`."""
    return config.sequence_length if recurrent(config) else config.n_step


def dqn(config, env: EnvFacts | None) -> None:
    """One iteration at least, a TD target of one step at least, the core's rules, a burn-in shorter than the
    sequence, a buffer that holds a rollout and a replayed window per env, and the Q-learner's env."""
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
    _q_env(config, env, "DQN")


def off_policy(config, env: EnvFacts | None, algorithm: str) -> None:
    """One iteration at least, a buffer that holds a rollout per env, and continuous actions (`algorithm` names
    the learner in the message)."""
    check_iterations(config)
    check_replay(config, config.num_steps)
    if env is not None:
        check_action_space(config, env.discrete, False, algorithm)


ddpg = functools.partial(off_policy, algorithm="DDPG")
td3 = functools.partial(off_policy, algorithm="TD3")
sac = functools.partial(off_policy, algorithm="SAC")

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
    "sarsa": sarsa,
    "pqn": pqn,
    "ddpg": ddpg,
    "td3": td3,
    "sac": sac,
}


def num_iterations(fields: dict, env: EnvFacts | None = None) -> int | None:
    """The run's iterations from its field values (`fields`) and its env's facts, or None where they do not give
    them."""
    try:
        return Values(fields, env).num_iterations
    except Unknown:
        return None


def check_values(algorithm: str, fields: dict, env: EnvFacts | None = None) -> None:
    """Refuses, in the words of the algorithm's `validate`, field values (`fields`: every field of `algorithm`'s
    Config by name) that break its rules with the env `env` (its facts; None: the rules that need them pass);
    passes an algorithm without an entry, and a rule that needs a count no facts give."""
    rules = BY_ALGORITHM.get(algorithm)
    if rules is None:
        return
    try:
        rules(Values(fields, env), env)
    except Unknown:
        pass
