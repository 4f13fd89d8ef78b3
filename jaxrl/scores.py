"""Aggregate metrics of score matrices [runs, tasks], with stratified bootstrap intervals.

The metrics and intervals of Agarwal et al. 2021, "Deep Reinforcement Learning at the Edge of the Statistical
Precipice" (NeurIPS), defined exactly as in their library, rliable (`rliable.metrics`, `rliable.library`):

    normalised score     s = (return - random) / (reference - random), per task
    IQM                  mean of the scores of all runs x tasks left after dropping the floor(n / 4) lowest and
                         the floor(n / 4) highest, n = runs * tasks (scipy.stats.trim_mean(s, 0.25, axis=None))
    median, mean         of the per-task means over runs
    optimality gap       gamma - mean(min(s, gamma)) over all runs x tasks
    performance profile  F(tau) = fraction of all runs x tasks scores > tau
    P(X > Y)             per task, P(x > y) + P(x = y) / 2 over all pairs of runs (the Mann-Whitney U statistic
                         divided by n_x n_y), averaged over tasks

Every metric takes scores of shape [..., runs, tasks] and returns one value per leading index, so a whole batch of
bootstrap resamples [reps, runs, tasks] is one call. Intervals come from one function,
`stratified_bootstrap_ci`: resample runs with replacement within each task, apply the metric, take the
percentile interval. Randomness comes from a `numpy.random.Generator` seeded explicitly.

    s = normalize(returns, *reference_scores("CartPole-v1"))                    # returns [runs, 1]
    points, cis = stratified_bootstrap_ci({"ppo": s_ppo, "dqn": s_dqn}, iqm, seed=0)
    profile = functools.partial(performance_profile, taus=np.linspace(0, 1.2, 61))
    profiles, bands = stratified_bootstrap_ci({"ppo": s_ppo}, profile, reps=2000, seed=0)
    poi, poi_ci = stratified_bootstrap_ci({"ppo > dqn": (s_ppo, s_dqn)}, probability_of_improvement, seed=0)
    curves, curve_cis = sample_efficiency_curve({"ppo": s_ppo_over_steps}, seed=0)   # [runs, tasks, steps]
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib import resources
from typing import NamedTuple, Union

import numpy as np

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

Scores = Union[np.ndarray, Sequence[np.ndarray]]

# Elements of resampled scores held at once by the bootstrap (float64: 32 MiB); reps are processed in chunks.
_CHUNK_ELEMENTS = 1 << 22


# ----------------------------------------------------------------------------------------------- normalisation


class ReferenceScores(NamedTuple):
    """The returns that map to score 0 (`random`) and score 1 (`reference`) on one environment."""

    random: float
    reference: float


@functools.cache
def _reference_table() -> dict:
    return tomllib.loads(resources.files("jaxrl").joinpath("reference_scores.toml").read_text(encoding="utf-8"))


def reference_scores(env_id: str) -> ReferenceScores:
    """The random-policy and reference returns of `env_id` (from `jaxrl/reference_scores.toml`)."""
    table = _reference_table()
    if env_id not in table:
        raise ValueError(f"reference_scores: no entry for {env_id!r}; known ids: {', '.join(table)}.")
    entry = table[env_id]
    return ReferenceScores(float(entry["random"]), float(entry["reference"]))


def normalize(returns, random, reference) -> np.ndarray:
    """Normalised scores (return - random) / (reference - random), per task.

    `returns` [..., tasks]; `random` and `reference` are scalars or [tasks] and broadcast against it. A score of 0
    is the random policy's return, 1 the reference return.
    """
    returns, random, reference = (np.asarray(a, np.float64) for a in (returns, random, reference))
    span = reference - random
    if np.any(span == 0):
        raise ValueError("normalize: reference equals random for some task, so its score is undefined.")
    return (returns - random) / span


# ----------------------------------------------------------------------------------------------- metrics


def _scores(scores, name: str = "scores") -> np.ndarray:
    s = np.asarray(scores, np.float64)
    if s.ndim < 2 or s.shape[-1] == 0 or s.shape[-2] == 0:
        raise ValueError(f"{name}: need an array [..., runs, tasks] with at least one run and task; got {s.shape}.")
    if not np.all(np.isfinite(s)):
        raise ValueError(f"{name}: scores must be finite (an unfinished episode's return is NaN).")
    return s


def mean(scores) -> np.ndarray:
    """Mean over tasks of the per-task mean over runs: scores [..., runs, tasks] -> [...]."""
    return np.mean(np.mean(_scores(scores), axis=-2), axis=-1)


def median(scores) -> np.ndarray:
    """Median over tasks of the per-task mean over runs: scores [..., runs, tasks] -> [...]."""
    return np.median(np.mean(_scores(scores), axis=-2), axis=-1)


def iqm(scores) -> np.ndarray:
    """Interquartile mean of all runs x tasks scores: the 25% trimmed mean, scores [..., runs, tasks] -> [...].

    With n = runs * tasks, the floor(n / 4) lowest and floor(n / 4) highest scores are dropped and the rest
    averaged (scipy.stats.trim_mean(scores, 0.25, axis=None)).
    """
    s = _scores(scores)
    flat = s.reshape(*s.shape[:-2], -1)
    n = flat.shape[-1]
    low = int(0.25 * n)
    high = n - low
    return np.mean(np.partition(flat, (low, high - 1), axis=-1)[..., low:high], axis=-1)


def optimality_gap(scores, gamma: float = 1.0) -> np.ndarray:
    """How far the scores fall short of `gamma`: gamma - mean(min(scores, gamma)) over all runs x tasks,
    scores [..., runs, tasks] -> [...]."""
    return gamma - np.mean(np.minimum(_scores(scores), gamma), axis=(-2, -1))


def performance_profile(scores, taus) -> np.ndarray:
    """The score distribution F(tau): the fraction of all runs x tasks scores > tau, for each tau.

    scores [..., runs, tasks], taus [K] -> [..., K] (a scalar tau gives [...]).
    """
    s = _scores(scores)
    flat = s.reshape(*s.shape[:-2], -1)
    taus = np.asarray(taus, np.float64)
    fractions = [np.mean(flat > tau, axis=-1) for tau in taus.reshape(-1)]
    return np.stack(fractions, axis=-1).reshape(flat.shape[:-1] + taus.shape)


def probability_of_improvement(scores_x, scores_y) -> np.ndarray:
    """P(X > Y): the probability that a run of algorithm X beats a run of Y on a task, averaged over tasks.

    Per task, P(x > y) + P(x = y) / 2 over all pairs of X's and Y's runs, i.e. the Mann-Whitney U statistic of X
    over Y divided by n_x n_y. scores_x [..., runs_x, tasks], scores_y [..., runs_y, tasks] -> [...].
    """
    x, y = _scores(scores_x, "scores_x"), _scores(scores_y, "scores_y")
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(f"probability_of_improvement: scores_x has {x.shape[-1]} tasks, scores_y {y.shape[-1]}.")
    xs, ys = x[..., :, None, :], y[..., None, :, :]
    wins = np.sum(xs > ys, axis=(-3, -2)) + 0.5 * np.sum(xs == ys, axis=(-3, -2))
    return np.mean(wins / (x.shape[-2] * y.shape[-2]), axis=-1)


# ----------------------------------------------------------------------------------------------- bootstrap


def _group(name, scores: Scores) -> tuple[np.ndarray, ...]:
    arrays = (scores,) if isinstance(scores, np.ndarray) else tuple(scores)
    if not arrays:
        raise ValueError(f"stratified_bootstrap_ci: {name!r} has no score arrays.")
    arrays = tuple(_scores(a, f"scores of {name!r}") for a in arrays)
    if len({a.shape[-1] for a in arrays}) > 1:
        raise ValueError(f"stratified_bootstrap_ci: the arrays of {name!r} differ in their number of tasks.")
    return arrays


def _resample_indices(
    rng: np.random.Generator, reps: int, shapes: Sequence[tuple[int, ...]]
) -> Iterator[list[np.ndarray]]:
    """The bootstrap's run indices, in chunks of reps: for each array [..., runs, tasks] of a group, one int array
    [chunk, runs, tasks] whose entry [b, i, m] is the run that replaces run i of task m in resample b."""
    per_rep = sum(int(np.prod(shape)) for shape in shapes)
    chunk = max(1, _CHUNK_ELEMENTS // per_rep)
    for start in range(0, reps, chunk):
        size = min(chunk, reps - start)
        yield [rng.integers(0, shape[-2], size=(size, *shape[-2:])) for shape in shapes]


def _resample(scores: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """scores [..., runs, tasks] resampled by indices [B, runs, tasks] -> [B, ..., runs, tasks]."""
    lead = (1,) * (scores.ndim - 2)
    return np.take_along_axis(scores[None], indices.reshape(indices.shape[0], *lead, *indices.shape[1:]), axis=-2)


def bootstrap_replicates(
    arrays: Sequence[np.ndarray], metric_fn: Callable, reps: int, rng: np.random.Generator, vectorized: bool = True
) -> np.ndarray:
    """`metric_fn(*resampled arrays)` on `reps` stratified bootstrap resamples -> [reps, *metric shape].

    Each array [..., runs, tasks] is resampled on its own: within each task, `runs` runs drawn with replacement
    from that task's runs; leading dims (e.g. steps) share the draw, so a run's learning curve stays whole.
    A vectorised `metric_fn` receives a chunk of resamples [B, ..., runs, tasks] at once and returns
    [B, *metric shape]; otherwise it is called on one resample at a time.
    """
    if not isinstance(reps, (int, np.integer)) or reps < 1:
        raise ValueError(f"reps={reps!r}: need a positive number of bootstrap resamples.")
    arrays = _group("arrays", arrays)
    values = []
    for indices in _resample_indices(rng, int(reps), [a.shape for a in arrays]):
        resampled = [_resample(a, i) for a, i in zip(arrays, indices, strict=True)]
        if vectorized:
            values.append(np.asarray(metric_fn(*resampled), np.float64))
        else:
            values.append(np.stack([np.asarray(metric_fn(*r), np.float64) for r in zip(*resampled, strict=True)]))
    return np.concatenate(values, axis=0)


def percentile_interval(replicates: np.ndarray, confidence: float = 0.95) -> np.ndarray:
    """The percentile bootstrap interval of replicates [reps, ...] -> [2, ...]: rows lower and upper bound, the
    (1 - confidence) / 2 and (1 + confidence) / 2 quantiles (linear interpolation)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence!r}: need a coverage strictly between 0 and 1, e.g. 0.95.")
    alpha = (1.0 - confidence) / 2
    return np.percentile(replicates, [100 * alpha, 100 * (1.0 - alpha)], axis=0)


def stratified_bootstrap_ci(
    scores_by_algo: Mapping[str, Scores],
    metric_fn: Callable,
    reps: int = 50_000,
    confidence: float = 0.95,
    seed: int | np.random.Generator = 0,
    vectorized: bool = True,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Point estimates and stratified bootstrap percentile intervals of `metric_fn`, per algorithm.

    `scores_by_algo[name]` is a score array [..., runs, tasks], or a sequence of them for a metric of several
    algorithms (e.g. `probability_of_improvement` of (scores_x, scores_y)), each resampled independently; its
    point estimate is `metric_fn(*arrays)`. The intervals are those of `bootstrap_replicates` with
    `percentile_interval`: [2, *metric shape], lower then upper bound, at coverage `confidence`. All algorithms
    draw in turn, in the mapping's order, from one Generator, `numpy.random.default_rng(seed)`.
    """
    rng = np.random.default_rng(seed)
    points, intervals = {}, {}
    for name, scores in scores_by_algo.items():
        arrays = _group(name, scores)
        points[name] = np.asarray(metric_fn(*arrays), np.float64)
        replicates = bootstrap_replicates(arrays, metric_fn, reps, rng, vectorized)
        intervals[name] = percentile_interval(replicates, confidence)
    return points, intervals


def sample_efficiency_curve(
    scores_by_algo: Mapping[str, np.ndarray],
    metric_fn: Callable = iqm,
    reps: int = 2_000,
    confidence: float = 0.95,
    seed: int | np.random.Generator = 0,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """An aggregate metric (IQM by default) at every evaluation point of training, with pointwise intervals.

    `scores_by_algo[name]` is [runs, tasks, steps]; returns the metric [steps] and its stratified bootstrap
    percentile intervals [2, steps] per algorithm. Each resample draws whole runs (learning curves) within each
    task, so every step sees the same resampled runs; each step's interval has the distribution it would have
    if that step were bootstrapped alone.
    """
    by_step = {}
    for name, scores in scores_by_algo.items():
        s = np.asarray(scores, np.float64)
        if s.ndim != 3:
            raise ValueError(f"sample_efficiency_curve: {name!r} needs scores [runs, tasks, steps]; got {s.shape}.")
        by_step[name] = np.moveaxis(s, -1, 0)
    return stratified_bootstrap_ci(by_step, metric_fn, reps, confidence, seed)
