"""Grouped rollouts for critic-free learners (GRPO, DPO): M groups of G members that share a start, each a
1-env rollout of `num_steps`, and the first-episode mask over them.

- `GroupConfig`: the fields of a learner on grouped rollouts; `num_envs` (M * G) and `num_steps` (the horizon,
  by default the env's time limit) are derived properties.
- `Setup`, built once per Config by `setup`: ONE environment (`make_env`, members are vmapped 1-env rollouts,
  `rollout.grouped_rollout`) and the actor-critic network of which only the actor is used.
- `init_actor` (actor-only parameters, the optimiser state, the trunk), `collect_groups` (starts, members, the
  grouped rollout, the first-episode mask and the group metrics) and `evaluation_policy`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import envs, parallel
from jaxrl.algos import base
from jaxrl.algos.base import shared, static
from jaxrl.algos.families import actor_critic as ac
from jaxrl.networks import ActorCritic, init_params
from jaxrl.rollout import (
    EnvCarry,
    episode_metrics,
    first_episode_mask,
    group_starts,
    grouped_rollout,
    no_critic,
    repeat_members,
)
from jaxrl.types import Trajectory

GROUP_MODES = ("start", "branch")


@struct.dataclass
class GroupConfig(base.Config):
    """The fields of a learner on grouped rollouts and of its policy network and optimiser; GRPO and DPO subclass it
    and add their own."""

    num_groups: int = static(4, "groups M per iteration")
    group_size: int = static(8, "members G per group (rollouts sharing a start)")
    group_mode: str = static("start", "start: groups start from fresh resets; branch: from states along rollouts")
    horizon: int = static(0, "steps each member runs; 0 = the env's time limit (whole episodes)")
    torso: str = shared("torso", "mlp")
    total_timesteps: int = static(500_000, "environment steps of the whole run (all members, masked steps too)")
    hidden_sizes: tuple[int, ...] = static((64, 64), "hidden layer sizes of the policy MLP")
    activation: str = shared("activation", "tanh")
    optimizer: str = shared("optimizer", "adam")
    anneal_lr: bool = shared("anneal_lr", True)
    ent_coef: float = shared("ent_coef", 0.0)
    max_grad_norm: float = shared("max_grad_norm", 0.5)

    @property
    def num_envs(self) -> int:
        """Members (environments) per iteration, M * G."""
        return self.num_groups * self.group_size

    @property
    def num_steps(self) -> int:
        """Steps per member per iteration: `horizon`, or the env's time limit when it is 0."""
        return self.horizon or time_limit(self.env)


@functools.lru_cache(maxsize=None)
def time_limit(env_id: str) -> int:
    """The env's `max_steps_in_episode` (`base.env_facts`; ValueError when it has none)."""
    limit = base.env_facts(env_id).time_limit
    if limit is None:
        raise ValueError(f"Config.horizon: {env_id} has no time limit; set horizon to the steps per member.")
    return limit


@dataclasses.dataclass(frozen=True)
class Setup:
    """The static pieces of a group learner: one environment and the (actor-critic) network."""

    env: Any
    network: ActorCritic


def make_env(config: GroupConfig):
    """One environment: members are vmapped 1-env rollouts (see `rollout.grouped_rollout`)."""
    return envs.make(config.env, 1, axis_name=parallel.axis_name())


def setup(config: GroupConfig) -> Setup:
    env = make_env(config)
    return Setup(env, ac.make_network(config, env.spec))


def init_trunk(setup: Setup, config: GroupConfig, key: jax.Array) -> EnvCarry | None:
    """Branch mode: the M ordinary rollouts groups branch from, leaves [M, 1, ...] (None in start mode)."""
    return group_starts(setup.env, key, config.num_groups) if config.group_mode == "branch" else None


def init_actor(setup: Setup, config: GroupConfig, key: jax.Array):
    """A critic-free group learner's start (GRPO, DPO): (key, actor-only params, optimiser state, trunk)."""
    key, net_key, trunk_key = jax.random.split(key, 3)
    dummy_obs = jnp.zeros((1, *setup.env.spec.observation_shape), jnp.float32)
    params = init_params(setup.network, net_key, dummy_obs, method=ActorCritic.policy)  # the actor only: no critic
    opt_state = ac.make_optimizer(config).init(params)
    return key, params, opt_state, init_trunk(setup, config, trunk_key)


def evaluation_policy(setup: Setup, config: GroupConfig, state, deterministic: bool = True):
    """`act(obs, key) -> action` of a group learner's policy (the mode when `deterministic`) and the identity
    normalisation (its members see raw observations), for `jaxrl.episodes.evaluate`."""
    return ac.evaluation_act(setup.network, state.params, deterministic), lambda obs: obs


def collect_groups(
    setup: Setup, config: GroupConfig, act: Callable, trunk: EnvCarry | None, key: jax.Array
) -> tuple[Trajectory, jax.Array, EnvCarry | None, dict[str, jax.Array]]:
    """One iteration's grouped rollout with the behaviour policy `act(obs, key) -> (action, log_prob)`.

    1. Starts. `group_mode="start"`: M fresh reset states. `"branch"`: the current states of the M trunk
       rollouts, so groups branch from states the policy visits; member 0 of each group carries the trunk on.
    2. Each start is copied G times and each member runs `num_steps` steps with its own key. Steps after a
       member's first episode ends are masked out.

    Returns (trajectory [T, M * G, ...], first-episode mask [T, M * G], new trunk (None in start mode), metrics:
    the members' first-episode return and length in start mode, the trunk's completed episodes in branch mode,
    and `valid_fraction`)."""
    env = setup.env
    starts_key, member_key = jax.random.split(key)
    if config.group_mode == "start":
        starts = group_starts(env, starts_key, config.num_groups)
    else:
        starts = trunk
    members = repeat_members(starts, config.group_size)
    member_keys = jax.random.split(member_key, config.num_envs)
    final, traj = grouped_rollout(env, act, no_critic(env), members, member_keys, config.num_steps)
    mask = first_episode_mask(traj.done)
    if config.group_mode == "start":
        returns = jnp.where(mask, traj.rewards, 0.0).sum(0)  # [N] return of each member's first episode
        lengths = mask.sum(0)
        metrics = {
            "episode_return": returns.mean(),
            "episode_length": lengths.mean(),
            "episodes": (mask & traj.done).sum(),
        }
        trunk = None
    else:  # member 0 of each group is an ordinary rollout: its episodes are the policy's
        trunk = jax.tree.map(lambda x: x[:: config.group_size], final)
        metrics = episode_metrics(jax.tree.map(lambda x: x[:, :: config.group_size], traj))
    metrics["valid_fraction"] = mask.mean()
    return traj, mask, trunk, metrics
