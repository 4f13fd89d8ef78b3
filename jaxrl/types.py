"""Pytrees that flow between rollout, estimators and losses.

Axes: `T` is time (the rollout length), `N` the environment batch; trajectories are time-major `[T, N, ...]`.
"""

import jax
from flax import struct


@struct.dataclass
class Trajectory:
    """One rollout of `T` steps of `N` environments; index t holds (s_t, a_t, r_t, s_{t+1}) facts."""

    obs: jax.Array  # [T, N, *obs_shape] float32, observation o_t the action was chosen from
    actions: jax.Array  # [T, N] int32 (discrete) or [T, N, A] float32 (continuous, before clipping)
    rewards: jax.Array  # [T, N] float32, r_t
    terminated: jax.Array  # [T, N] bool, s_{t+1} is terminal: bootstrap with 0
    truncated: jax.Array  # [T, N] bool, the episode was cut by a time limit after step t
    log_probs: jax.Array  # [T, N] float32, log pi_behaviour(a_t | o_t) at collection time
    values: jax.Array  # [T, N] float32, V(o_t) (zeros for critic-free policies)
    next_values: jax.Array  # [T, N] float32, V of the true successor of step t: V(o_{t+1}) inside an
    #   episode, V(final observation) where truncated, 0 where terminated
    episode_return: jax.Array  # [T, N] float32, return of the episode that ended at t, else 0
    episode_length: jax.Array  # [T, N] int32, length of the episode that ended at t, else 0
    next_obs: jax.Array | None = None  # [T, N, *obs_shape] float32, the true successor o_{t+1} of step t
    #   (`info["final_observation"]`: the auto-reset one is NOT stored); only with rollout(keep_next_obs=True)

    @property
    def done(self) -> jax.Array:
        """[T, N] bool: an episode ended at step t (terminated or truncated)."""
        return self.terminated | self.truncated
