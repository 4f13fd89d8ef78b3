"""Deep Deterministic Policy Gradient (Lillicrap et al. 2016, "Continuous control with deep reinforcement learning"):
a deterministic actor mu(o) in [-1, 1]^A (scaled to the env's bounds) and a critic Q(o, a), both with slowly
moving Polyak target networks, trained off-policy from a replay buffer.

As in Fujimoto et al. 2018's re-tuned DDPG ("OurDDPG") and CleanRL: Gaussian exploration noise instead of the
Ornstein-Uhlenbeck process, uniformly random actions for the first `learning_starts` env steps, no weight decay
on the critic. Each gradient step regresses Q on y = r + gamma (1 - terminated) Q'(o', mu'(o')) and ascends
Q(o, mu(o)) in the actor; the targets move by tau every step. The shared pieces (iteration, replay, critic loss,
the gradient step) are in `jaxrl.continuous`; TD3 (`td3.py`) is this with its three additions switched on.
"""

from __future__ import annotations

import functools

import jax
from flax import struct

from jaxrl import continuous
from jaxrl.configs import check_range, hyper, static
from jaxrl.continuous_networks import DeterministicActor

TrainState = continuous.TrainState
gradient_step = continuous.dpg_step  # TD3's additions off: one critic (num_critics=1), no smoothing, no delay


@struct.dataclass
class Config(continuous.Config):
    num_critics: int = static(1, "Q-networks; targets take their minimum (DDPG: 1)")
    exploration_noise: float = hyper(0.1, "std of the Gaussian exploration noise, in units of the half-range")


def validate(config: Config, name: str = "DDPG") -> None:
    """Raises a ValueError naming the field and the fix for a config that cannot run."""
    continuous.validate(config, name)
    check_range(config, "exploration_noise", 0.0)


def make_networks(config: Config) -> continuous.Networks:
    spec = continuous.make_env(config).spec
    obs_ndim = len(spec.observation_shape)
    actor = DeterministicActor(spec.action_dim, config.hidden_sizes, config.activation, obs_ndim)
    return continuous.Networks(actor, continuous.make_critic(config, spec))


def init(config: Config, key: jax.Array) -> TrainState:
    return continuous.init(config, key, make_networks(config), continuous.optimizers(config))


def update(config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration: collect `num_steps` steps of every env with mu(o) + noise, then `updates_per_iteration`
    gradient steps (critic, actor, targets)."""
    explore = continuous.gaussian_explore()
    return continuous.update(config, state, make_networks(config), gradient_step, explore)


def train(config: Config, key: jax.Array) -> tuple[TrainState, dict[str, jax.Array]]:
    """init + `lax.scan` of `update` over `config.num_iterations`; metrics are stacked per iteration."""
    return continuous.train(config, key, init, update)


def make_train(config: Config):
    """Validates `config` and returns the pure `train(key) -> (TrainState, metrics)`, ready to jit/vmap."""
    validate(config)
    return functools.partial(train, config)


def evaluation_policy(config: Config, state: TrainState, deterministic: bool = True):
    """mu(o) scaled to the env's bounds (plus the exploration noise when not `deterministic`)."""
    return continuous.deterministic_evaluation_policy(config, make_networks(config), state, deterministic)
