"""Twin Delayed DDPG (Fujimoto, van Hoof & Meger 2018, "Addressing Function Approximation Error in Actor-Critic
Methods"): DDPG with three additions against overestimation and variance:

1. clipped double Q-learning: two critics, both regressed on the minimum of their targets;
2. target policy smoothing: the target action is mu'(o') + clip(N(0, policy_noise^2), -noise_clip, noise_clip),
   clipped to the action box;
3. delayed policy updates: the actor and the target networks move only every `policy_delay`-th critic step.

The gradient step is the family's `off_policy.dpg_step` (DDPG's) with these switched on; noise scales are in units
of the action half-range (actions are normalised to [-1, 1]^A), as the paper's 0.2 / 0.5 are for MuJoCo's [-1, 1]
actions.
"""

from __future__ import annotations

import jax
from flax import struct

from jaxrl import config_rules
from jaxrl.algos.base import hyper, make_train, static, takes_setup, train  # noqa: F401 (re-exports make_train, train)
from jaxrl.algos.families import off_policy

TrainState = off_policy.TrainState
Setup = off_policy.Setup
setup = off_policy.setup  # the env in normalised actions, a DeterministicActor and the critics
init = off_policy.dpg_init
evaluation_policy = off_policy.dpg_evaluation_policy  # mu(o) (plus the exploration noise if not deterministic)


@struct.dataclass
class Config(off_policy.DPGConfig):
    num_critics: int = static(2, "Q-networks; targets take their minimum (clipped double Q-learning)")
    policy_delay: int = static(2, "critic steps per actor and target update (delayed policy updates)")
    policy_noise: float = hyper(0.2, "std of the target policy smoothing noise (units of the half-range)")
    noise_clip: float = hyper(0.5, "the target smoothing noise is clipped to [-noise_clip, noise_clip]")


def validate(config: Config) -> None:
    """Raises a ValueError naming the field and the fix for a config that cannot run."""
    off_policy.validate(config, config_rules.td3)


def gradient_step(config: Config, networks: off_policy.Networks, state: TrainState, batch, key):
    """`off_policy.dpg_step` with target policy smoothing and delayed actor / target updates."""
    return off_policy.dpg_step(
        config,
        networks,
        state,
        batch,
        key,
        policy_noise=config.policy_noise,
        noise_clip=config.noise_clip,
        policy_delay=config.policy_delay,
    )


@takes_setup
def update(setup: Setup, config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration: collect `num_steps` steps of every env with mu(o) + noise, then `updates_per_iteration`
    TD3 gradient steps."""
    return off_policy.update(setup, config, state, gradient_step, off_policy.gaussian_explore)
