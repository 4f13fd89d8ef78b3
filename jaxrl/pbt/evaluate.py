"""A population's members on fresh episodes, with the protocol of `jaxrl train`'s evaluation and `jaxrl eval`
(docs/evaluation.md): `jaxrl.episodes.evaluate` with the deterministic and the stochastic policy, reported apart,
on keys that never meet the training keys.

`evaluate_best` is what a PBT run does after its last iteration: the best member (rank 0 at the last ready step,
the first line of the printed ranking) with the hyperparameters it ended with, on the run's evaluation stream
(`run.compile.eval_keys(seed, population)[member]` folded with the iteration it follows, as `jaxrl train
--eval-every` keys a seed's evaluation). `evaluate_folder` is `jaxrl eval` on a population's folder: every member
of its latest checkpoint on the same `--seed` episodes, the best one named.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.algos import base
from jaxrl.episodes import evaluate
from jaxrl.run.compile import eval_keys

MODES = ("deterministic", "stochastic")


@functools.lru_cache(maxsize=8)
def _program(config, episodes: int):
    """The jitted `(states, configs, key) -> {mode: (mean return, finished)}` of `play` for the population of
    `config` (built once per Config and episode count, so a resumed run in the same process reuses it)."""
    algo = base.algorithm_of(config)
    setup = base.make_setup(config, algo)

    def one(state, member_config, key, deterministic):
        policy = base.evaluation_policy(member_config, state, deterministic=deterministic, setup=setup, algo=algo)
        out = evaluate(config.env, policy[0], key, episodes, normalize=policy[1])
        return jnp.where(out["finished"] > 0, out["mean_return"], jnp.nan), out["finished"]

    def both(states, configs, key):
        members = {mode: functools.partial(one, deterministic=mode == "deterministic") for mode in MODES}
        return {mode: jax.vmap(f, in_axes=(0, 0, None))(states, configs, key) for mode, f in members.items()}

    return jax.jit(both)


def play(config, states, configs, key: jax.Array, episodes: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{mode: (mean return [M], finished episodes [M])} of members (TrainState leaves [M, ...], Config leaves
    [M]; `config` the population's base Config) each playing `episodes` episodes from `key` (the same for every
    member and both modes); the mean return is NaN for a member none of whose episodes ended within the env's time
    limit."""
    return jax.device_get(_program(config, episodes)(states, configs, key))


def best_member(rank: np.ndarray) -> int:
    """The member ranked first at the last ready step (`rank` [ready steps, P], 0 best)."""
    return int(np.argmin(np.asarray(rank)[-1]))


def _number(x) -> float | None:
    x = float(x)
    return round(x, 4) if np.isfinite(x) else None


def evaluate_best(config, states, configs, lineage, seed: int, iteration: int, episodes: int) -> dict:
    """The evaluation of the best member (`best_member`) after `iteration` iterations on `episodes` fresh
    episodes per mode, as summary.json holds it: member, its fitness, iteration, episodes, each mode's mean return
    (None when no episode ended) and finished episodes, and the hyperparameters it ended with."""
    member = best_member(lineage.rank)
    population = np.asarray(lineage.rank).shape[1]
    key = jax.random.fold_in(eval_keys(seed, population)[member], iteration)
    take = lambda tree: jax.tree.map(lambda x: x[member : member + 1], tree)  # noqa: E731
    scores = play(config, take(states), take(configs), key, episodes)
    out = {"member": member, "fitness": _number(np.asarray(lineage.fitness)[-1, member]), "iteration": iteration}
    out["episodes"] = episodes
    for mode in MODES:
        out[f"{mode}_return"] = _number(scores[mode][0][0])
        out[f"{mode}_finished"] = int(scores[mode][1][0])
    hyper = {n: np.asarray(v)[-1, member] for n, v in lineage.next_hyperparameters.items()}
    out["hyperparameters"] = {n: float(str(v)) for n, v in hyper.items()}
    return out


def evaluation_text(evaluation: dict) -> str:
    """The summary's line of `evaluate_best`'s result."""

    def value(mode):
        x = evaluation[f"{mode}_return"]
        return "no episode ended" if x is None else f"{x:.2f}"

    return (
        f"best member {evaluation['member']} on {evaluation['episodes']} fresh episodes after iteration "
        f"{evaluation['iteration']}: deterministic return {value('deterministic')}, stochastic return "
        f"{value('stochastic')}"
    )
