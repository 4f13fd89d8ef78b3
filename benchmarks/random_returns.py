"""Returns of the uniform-random policy: the `random` entries of `jaxrl/reference_scores.toml`.

For each env, `jaxrl.run.evaluate.evaluate` plays `--episodes` fresh episodes (each from reset to its end, the
env's own time limit) with actions drawn uniformly: a discrete action uniform over the actions, a continuous one
uniform over the action box. Prints one line per env: the mean return, its standard error and the min and max.

Usage: `python -m benchmarks.random_returns [--episodes 64] [--seed 0] [--envs CartPole-v1 ...]`.
"""

from __future__ import annotations

import argparse

import jax
import numpy as np

from jaxrl import envs
from jaxrl.run.evaluate import evaluate

ENVS = [
    "CartPole-v1",
    "Acrobot-v1",
    "MountainCar-v0",
    "Pendulum-v1",
    "MountainCarContinuous-v0",
    "Asterix-MinAtar",
    "Breakout-MinAtar",
    "Freeway-MinAtar",
    "SpaceInvaders-MinAtar",
]


def uniform_policy(spec: envs.EnvSpec):
    """`act(obs[E, ...], key) -> action[E, ...]`, uniform over the action space of `spec`."""
    if spec.discrete:
        return lambda obs, key: jax.random.randint(key, (obs.shape[0],), 0, spec.action_dim)
    return lambda obs, key: jax.random.uniform(
        key, (obs.shape[0], spec.action_dim), minval=spec.action_low, maxval=spec.action_high
    )


def random_returns(env_id: str, episodes: int, seed: int) -> np.ndarray:
    spec = envs.make(env_id).spec
    out = jax.jit(lambda key: evaluate(env_id, uniform_policy(spec), key, episodes))(jax.random.key(seed))
    if int(out["finished"]) != episodes:
        raise RuntimeError(f"{env_id}: {int(out['finished'])} of {episodes} episodes finished")
    return np.asarray(out["returns"], np.float64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--envs", nargs="+", default=ENVS)
    args = parser.parse_args()
    for env_id in args.envs:
        r = random_returns(env_id, args.episodes, args.seed)
        sem = r.std(ddof=1) / np.sqrt(len(r))
        print(f"{env_id}: mean {r.mean():.2f} (s.e. {sem:.2f}), min {r.min():.1f}, max {r.max():.1f}", flush=True)


if __name__ == "__main__":
    main()
