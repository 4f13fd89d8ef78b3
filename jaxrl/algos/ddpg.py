"""Deep Deterministic Policy Gradient (Lillicrap et al. 2016, "Continuous control with deep reinforcement learning"):
a deterministic actor mu(o) in [-1, 1]^A (scaled to the env's bounds) and a critic Q(o, a), both with slowly
moving Polyak target networks, trained off-policy from a replay buffer.

As in Fujimoto et al. 2018's re-tuned DDPG ("OurDDPG") and CleanRL: Gaussian exploration noise instead of the
Ornstein-Uhlenbeck process, uniformly random actions for the first `learning_starts` env steps, no weight decay
on the critic. Each gradient step regresses Q on y = r + gamma (1 - terminated) Q'(o', mu'(o')) and ascends
Q(o, mu(o)) in the actor; the targets move by tau every step. The shared pieces (iteration, replay, critic loss,
the gradient step `dpg_step`) are in the family module `jaxrl.algos.families.off_policy`; TD3 is the same step with its
three additions switched on.
"""

from __future__ import annotations

import jax
from flax import struct

from jaxrl import config_rules
from jaxrl.algos.base import make_train, static, takes_setup, train  # noqa: F401 (re-exports make_train, train)
from jaxrl.algos.families import off_policy

TrainState = off_policy.TrainState
Setup = off_policy.Setup
setup = off_policy.setup  # the env in normalised actions, a DeterministicActor and the critics
init = off_policy.dpg_init
evaluation_policy = off_policy.dpg_evaluation_policy  # mu(o) (plus the exploration noise if not deterministic)
gradient_step = off_policy.dpg_step  # TD3's additions off: one critic (num_critics=1), no smoothing, no delay


@struct.dataclass
class Config(off_policy.DPGConfig):
    num_critics: int = static(1, "Q-networks; targets take their minimum (DDPG: 1)")


def validate(config: Config) -> None:
    """Raises a ValueError naming the field and the fix for a config that cannot run."""
    off_policy.validate(config, config_rules.ddpg)


@takes_setup
def update(setup: Setup, config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration: collect `num_steps` steps of every env with mu(o) + noise, then `updates_per_iteration`
    gradient steps (critic, actor, targets)."""
    return off_policy.update(setup, config, state, gradient_step, off_policy.gaussian_explore)
