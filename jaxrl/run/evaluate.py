"""A run folder's latest checkpoint evaluated on fresh episodes, every seed (`evaluate_checkpoint`); the episodes
themselves are `jaxrl.episodes.evaluate`, re-exported here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jax
import numpy as np

from jaxrl.episodes import evaluate

__all__ = ["evaluate", "evaluate_checkpoint", "restore_latest"]


def restore_latest(run_dir: Path):
    """(saved config.json, algorithm module, Config, iteration, states) of the latest checkpoint of every seed of
    the run folder `run_dir`: states leaves [seeds, ...], without the replay buffer and the optimiser state
    (`checkpoint.LEARNING_ONLY`, None: no policy reads them; the buffer is most of an off-policy run's checkpoint).
    Reads only; one-line errors for a folder that is not a run (a population's included) or has no checkpoint."""
    from jaxrl.algos import base
    from jaxrl.run import checkpoint
    from jaxrl.run.compile import abstract_state
    from jaxrl.run.folder import load_run_config, read_run_folder

    run_dir = Path(run_dir)
    saved = read_run_folder(run_dir)
    if "pbt" in saved:
        raise ValueError(
            f"{run_dir} is a population (jaxrl pbt), not a run of seeds: jaxrl eval {run_dir} plays its members "
            "(from Python: jaxrl.pbt.evaluate_folder)."
        )
    module, config, seeds, base_seed = load_run_config(run_dir, saved)
    keys = jax.random.split(jax.random.key(base_seed), seeds)
    like = jax.eval_shape(jax.vmap(lambda k: base.initial_state(config, k, algo=module)), keys)

    def like_for(devices):  # a data-parallel run's checkpoint: its state laid out for one device
        return abstract_state(module, config, keys, devices)

    iteration, states, _ = checkpoint.restore(
        run_dir / "checkpoints", like, saved, like_for=like_for, leave_out=checkpoint.LEARNING_ONLY
    )
    return saved, module, config, iteration, states


def evaluate_checkpoint(run_dir: Path, episodes: int, seed: int) -> Iterator[str]:
    """Restores the latest checkpoint of every seed of the run folder `run_dir` and plays `episodes` fresh
    episodes per seed (keys from `seed`) with its deterministic and its stochastic policy; yields the report
    line by line as it is measured: a heading, then per mode the mean return over seeds and each seed's."""
    from jaxrl.algos import base

    if episodes < 1:
        raise ValueError(f"--episodes {episodes}: need at least one episode.")
    saved, module, config, iteration, states = restore_latest(run_dir)
    yield f"{run_dir}: {saved['algo']} on {config.env}, checkpoint after iteration {iteration}, {episodes} episodes"
    for mode in ("deterministic", "stochastic"):

        def one_seed(state, mode=mode):
            act, normalize = base.evaluation_policy(config, state, deterministic=mode == "deterministic", algo=module)
            return evaluate(config.env, act, jax.random.key(seed), episodes, normalize=normalize)["mean_return"]

        returns = np.asarray(jax.jit(jax.vmap(one_seed))(states))
        yield f"{mode:14s} mean return {returns.mean():9.2f}   per seed {', '.join(f'{r:.1f}' for r in returns)}"
