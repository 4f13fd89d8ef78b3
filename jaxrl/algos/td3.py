"""Twin Delayed DDPG (Fujimoto, van Hoof & Meger 2018, "Addressing Function Approximation Error in Actor-Critic
Methods"): DDPG (`ddpg.py`) with three additions against overestimation and variance:

1. clipped double Q-learning: two critics, both regressed on the minimum of their targets;
2. target policy smoothing: the target action is mu'(o') + clip(N(0, policy_noise^2), -noise_clip, noise_clip),
   clipped to the action box;
3. delayed policy updates: the actor and the target networks move only every `policy_delay`-th critic step.

The gradient step is `continuous.dpg_step` with these switched on; noise scales are in units of the action
half-range (actions are normalised to [-1, 1]^A), as the paper's 0.2 / 0.5 are for MuJoCo's [-1, 1] actions.
"""

from __future__ import annotations

import functools

import jax
from flax import struct

from jaxrl import continuous
from jaxrl.algos import ddpg
from jaxrl.configs import check, check_range, hyper, static

TrainState = continuous.TrainState
make_networks = ddpg.make_networks
init = ddpg.init
evaluation_policy = ddpg.evaluation_policy


@struct.dataclass
class Config(ddpg.Config):
    num_critics: int = static(2, "Q-networks; targets take their minimum (clipped double Q-learning)")
    policy_delay: int = static(2, "critic steps per actor and target update (delayed policy updates)")
    policy_noise: float = hyper(0.2, "std of the target policy smoothing noise (units of the half-range)")
    noise_clip: float = hyper(0.5, "the target smoothing noise is clipped to [-noise_clip, noise_clip]")


def validate(config: Config) -> None:
    """Raises a ValueError naming the field and the fix for a config that cannot run."""
    ddpg.validate(config, "TD3")
    check(
        isinstance(config.policy_delay, int) and config.policy_delay >= 1,
        "policy_delay",
        f"got {config.policy_delay!r}, must be a positive integer.",
    )
    check_range(config, "policy_noise", 0.0)
    check_range(config, "noise_clip", 0.0)


def gradient_step(config: Config, networks, state: TrainState, batch, key):
    """`continuous.dpg_step` with target policy smoothing and delayed actor / target updates."""
    return continuous.dpg_step(
        config,
        networks,
        state,
        batch,
        key,
        policy_noise=config.policy_noise,
        noise_clip=config.noise_clip,
        policy_delay=config.policy_delay,
    )


def update(config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration: collect `num_steps` steps of every env with mu(o) + noise, then `updates_per_iteration`
    TD3 gradient steps."""
    explore = continuous.gaussian_explore()
    return continuous.update(config, state, make_networks(config), gradient_step, explore)


def train(config: Config, key: jax.Array) -> tuple[TrainState, dict[str, jax.Array]]:
    """init + `lax.scan` of `update` over `config.num_iterations`; metrics are stacked per iteration."""
    return continuous.train(config, key, init, update)


def make_train(config: Config):
    """Validates `config` and returns the pure `train(key) -> (TrainState, metrics)`, ready to jit/vmap."""
    validate(config)
    return functools.partial(train, config)
