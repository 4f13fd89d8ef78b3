"""Vectorised JAX environments and their pure wrappers.

`make(env_id, num_envs=N)` returns a `VecEnv`: `reset(key) -> (obs[N, ...], state)` and
`step(key, state, action[N, ...]) -> (obs, state, reward[N], terminated[N], truncated[N], info)`.
Wrappers act on the whole batch (observation statistics are shared across the N envs), hold their
state in `flax.struct` pytrees and are pure, so a VecEnv steps inside `jax.jit`, `lax.scan` and `jax.vmap`.

`info["final_observation"]` is the true successor observation of every env (before auto-reset): on a
truncated step its value is what a return bootstraps from.

Action masks: an env whose `EnvSpec.action_mask` is True has flat observations [N, D] whose last `action_dim`
entries are the mask of that observation (1 valid, 0 not; `action_mask` reads it). The mask travels inside the
observation, so the contract keeps one observation array and every path that stores or replays observations
(rollouts, minibatches, replay, evaluation, final observations) carries it unchanged; `NormalizeObservation`
leaves it raw, and the heads of `jaxrl.networks` mask their logits and action values with it.

Ids: a plain id (`CartPole-v1`) is a gymnax environment; `suite:Name` (`navix:Navix-Empty-5x5-v0`,
`brax:inverted_pendulum`, ...) is one of the suites of `jaxrl.envs.suites`, an optional extra adapted to this same
contract; any other id is one a user added with `register` (a gymnax 1.x environment or a VecEnv of their own).

Modules, bottom up: `spec` (EnvSpec, the VecEnv protocol), `gymnax` (the gymnax adapter), `wrappers`
(per-device keys, normalisation, episode statistics, clipping and scaling), `suites` (one adapter per suite,
importing only spec and wrappers), `registry` (ids, `register`, `make`), `memory` (memory tasks as registered
ids: MemoryChain at a chosen length, POPGym's tasks), `popgym` (POPGym's tasks in JAX, imported on first use).
None of them imports the rest of jaxrl.

gymnax is imported on first use, not with this package: its import creates JAX arrays, which initialises JAX's
backends, after which the CPU device count (`jaxrl.sweep.use_cpu_cores`) and `jax.distributed.initialize`
can no longer be set up.
"""

from jaxrl.envs import memory  # noqa: F401, E402  (registers the MemoryChain-bsuite-L<n> and popgym-* ids)
from jaxrl.envs.gymnax import GymnaxVecEnv, spec_of
from jaxrl.envs.registry import _REGISTERED, Registration, check_env_id, make, register, registered_ids  # noqa: F401
from jaxrl.envs.spec import EnvSpec, VecEnv, action_mask
from jaxrl.envs.wrappers import (
    OBS_CLIP,
    ClipAction,
    DeviceKeys,
    EpisodeStatistics,
    EpisodeStatisticsState,
    NormalizeObservation,
    NormalizeObservationState,
    NormalizeReward,
    NormalizeRewardState,
    RunningMeanStd,
    ScaleAction,
    Wrapper,
    device_key,
    mean_var,
    observation_normalizer,
    scale_action,
)

__all__ = [
    "OBS_CLIP",
    "ClipAction",
    "DeviceKeys",
    "EnvSpec",
    "EpisodeStatistics",
    "EpisodeStatisticsState",
    "GymnaxVecEnv",
    "NormalizeObservation",
    "NormalizeObservationState",
    "NormalizeReward",
    "NormalizeRewardState",
    "Registration",
    "RunningMeanStd",
    "ScaleAction",
    "VecEnv",
    "Wrapper",
    "action_mask",
    "check_env_id",
    "device_key",
    "make",
    "mean_var",
    "observation_normalizer",
    "register",
    "registered_ids",
    "scale_action",
    "spec_of",
]
