"""PBT overhead: seconds of one ready block (`ready` vmapped iterations of a population) with the exploit/explore
step (`jaxrl.pbt.ready_step`: rank, select, copy the TrainStates, perturb) against the same block without it.

Both programs are compiled first (compile seconds reported apart), then called alternately A B B A for
`--repeats` rounds on the same inputs; the ratio is the median of A over the median of B. Prints only.
Usage: `python -m benchmarks.pbt_overhead [--population 8] [--ready 5] [--num-envs 16] [--repeats 5]`.
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

from jaxrl import pbt
from jaxrl.algos import base, ppo


def programs(config, pbt_config):
    """(with, without): jitted `(states, configs, key) -> (states, configs)` of one ready block."""
    priors = pbt.validate(config, pbt_config)
    algo = base.algorithm_of(config)
    setup = base.make_setup(config, algo)

    def iterations(states, configs):
        def body(states, _):
            return jax.vmap(lambda c, s: base.iteration(algo, setup, c, s))(configs, states)

        return jax.lax.scan(body, states, None, length=pbt_config.ready)

    def with_step(states, configs, key):
        states, metrics = iterations(states, configs)
        fitness = pbt.fitness_of(metrics[pbt.FITNESS_METRIC], pbt_config.window)
        return pbt.ready_step(states, configs, fitness, key, pbt_config, priors)[:2]

    def without_step(states, configs, key):
        return iterations(states, configs)[0], configs

    return jax.jit(with_step), jax.jit(without_step), setup, algo


def timed(fn, *args) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--ready", type=int, default=5)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--num-steps", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    config = ppo.Config(
        num_envs=args.num_envs, num_steps=args.num_steps, total_timesteps=args.num_envs * args.num_steps * args.ready
    )
    pbt_config = pbt.PBTConfig(
        population=args.population,
        ready=args.ready,
        explore={"learning_rate": "loguniform:1e-4:1e-2", "ent_coef": "uniform:0:0.05"},
    )
    with_step, without_step, setup, algo = programs(config, pbt_config)
    k_pop, k_members, k_step = jax.random.split(jax.random.key(0), 3)
    configs = pbt.initial_population(config, pbt_config, k_pop)
    states = jax.vmap(lambda c, k: base.initial_state(c, k, setup, algo))(
        configs, jax.random.split(k_members, args.population)
    )
    inputs = (states, configs, k_step)
    compiled = {}
    for name, fn in (("with", with_step), ("without", without_step)):
        start = time.perf_counter()
        compiled[name] = fn.lower(*inputs).compile()
        print(f"compile {name:7s} exploit/explore: {time.perf_counter() - start:.2f} s")
    for fn in compiled.values():  # one warm-up call each
        timed(fn, *inputs)
    seconds = {"with": [], "without": []}
    for _ in range(args.repeats):
        for name in ("with", "without", "without", "with"):
            seconds[name].append(timed(compiled[name], *inputs))
    a, b = np.median(seconds["with"]), np.median(seconds["without"])
    print(f"population {args.population}, ready {args.ready}, PPO {args.num_envs} envs x {args.num_steps} steps")
    print(f"one ready block: with {a * 1e3:.2f} ms, without {b * 1e3:.2f} ms (medians of {2 * args.repeats})")
    print(f"ratio with / without: {a / b:.4f}")


if __name__ == "__main__":
    main()
