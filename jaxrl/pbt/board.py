"""TensorBoard event files of a population (`PopulationBoard`; `jaxrl pbt --tensorboard`), written between
compiled chunks as `jaxrl train --tensorboard` writes a run's.

`tensorboard/member_M/` is one TensorBoard run per member, so the members overlay in one chart per tag: every
training metric per iteration under its own name (as `jaxrl train` writes it), and per ready step `pbt/fitness`,
`pbt/rank` (0 best), `pbt/exploited` (1 when the member was replaced) and `pbt/parent`, and each explored
hyperparameter as `hyperparameters/NAME`, the value the member trains with from that step on (at step 0 its
initial value). `tensorboard/population/` holds `pbt/best_fitness` and `pbt/median_fitness` per ready step and,
after the run, the best member's evaluation (`eval/member`, `eval/deterministic_return`,
`eval/stochastic_return`); with `PBTConfig.eval_every`, each member's `eval_return`, `eval_length` and
`eval_finished` are among its metrics at the iterations evaluated, and the population's run holds
`pbt/best_eval_return` and `pbt/median_eval_return` there. The x axis is the env steps of one member: a ready
step after iteration i sits at the step of that iteration.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np

from jaxrl.pbt.lineage import Lineage
from jaxrl.run.logging import TensorBoardSink


class PopulationBoard:
    """The event files of `population` members in `directory`, x = env steps (`steps_per_iteration` each).

    `resume_step` (a resume, the env steps of its first new iteration): as `run.logging.TensorBoardSink`, each run
    folder that already holds event files starts its new file with TensorBoard's purge of the steps from there on
    (those an interrupted run wrote after its checkpoint) and steps before it are not written again."""

    def __init__(self, directory: Path, population: int, steps_per_iteration: int, resume_step: int | None = None):
        directory = Path(directory)
        self.steps = steps_per_iteration
        self.members = [TensorBoardSink(directory / f"member_{m}", resume_step) for m in range(population)]
        self.population = TensorBoardSink(directory / "population", resume_step)

    def write_metrics(self, metrics: dict[str, np.ndarray], first_iteration: int) -> None:
        """Every member's training metrics {name: [P, size]} of iterations `first_iteration`, ..."""
        for m, sink in enumerate(self.members):
            sink.write({name: values[m : m + 1] for name, values in metrics.items()}, first_iteration, self.steps)
        evaluated = np.asarray(metrics.get("eval_return", np.zeros((0, 0))))
        for i in range(evaluated.shape[1]):
            finite = evaluated[:, i][np.isfinite(evaluated[:, i])]
            step = (first_iteration + i + 1) * self.steps
            if finite.size and step >= self.population.skip_before:
                self.population.writer.add_scalar("pbt/best_eval_return", float(finite.max()), step)
                self.population.writer.add_scalar("pbt/median_eval_return", float(np.median(finite)), step)

    def write_lineage(self, part: Lineage, ready: int) -> None:
        """The ready steps of `part` (a chunk's lineage; `ready`: iterations per block)."""
        host = jax.tree.map(np.asarray, part)
        for k, iteration in enumerate(host.iteration):
            step = int(iteration) * self.steps
            for m, sink in enumerate(self.members):
                if int(iteration) == ready and sink.skip_before == 0:  # the run's first block: where it started
                    for name, values in host.hyperparameters.items():
                        sink.writer.add_scalar(f"hyperparameters/{name}", float(values[k, m]), 0)
                if step < sink.skip_before:
                    continue
                if np.isfinite(host.fitness[k, m]):
                    sink.writer.add_scalar("pbt/fitness", float(host.fitness[k, m]), step)
                sink.writer.add_scalar("pbt/rank", int(host.rank[k, m]), step)
                sink.writer.add_scalar("pbt/exploited", int(host.exploited[k, m]), step)
                sink.writer.add_scalar("pbt/parent", int(host.parent[k, m]), step)
                for name, values in host.next_hyperparameters.items():
                    sink.writer.add_scalar(f"hyperparameters/{name}", float(values[k, m]), step)
            finite = host.fitness[k][np.isfinite(host.fitness[k])]
            if step >= self.population.skip_before and finite.size:
                self.population.writer.add_scalar("pbt/best_fitness", float(finite.max()), step)
                self.population.writer.add_scalar("pbt/median_fitness", float(np.median(finite)), step)
        self.flush()

    def write_evaluation(self, evaluation: dict, step: int) -> None:
        """The best member's evaluation (`pbt.evaluate.evaluate_best`) at `step`, the run's last env step."""
        if step < self.population.skip_before:
            return
        writer = self.population.writer
        writer.add_scalar("eval/member", evaluation["member"], step)
        for mode in ("deterministic", "stochastic"):
            value = evaluation[f"{mode}_return"]
            if value is not None and np.isfinite(value):
                writer.add_scalar(f"eval/{mode}_return", float(value), step)
        self.flush()

    def flush(self) -> None:
        for sink in [*self.members, self.population]:
            sink.writer.flush()

    def close(self) -> None:
        for sink in [*self.members, self.population]:
            sink.close()
