"""Population-based training (Jaderberg et al. 2017, "Population Based Training of Neural Networks", arXiv
1711.09846) as ONE compiled program.

A population of P members of one algorithm trains side by side (`jax.vmap` over members of `base.iteration`). Every
`ready` iterations each member's fitness is measured: the mean `episode_return` over its last `fitness_window`
iterations (iterations in which no episode finished are ignored; a member with none ranks last), or with
`fitness="eval"` its evaluation return at that iteration. With `eval_every` each member plays `eval_episodes` fresh
episodes with its deterministic policy every `eval_every` iterations inside the program, on the run's evaluation
key stream (`eval_stream`), as `jaxrl train --eval-every` evaluates a seed. The members are ranked, best first,
ties broken by member index. Each member in the bottom `truncation` fraction then

* exploits: copies the TrainState of a member drawn uniformly from the top `truncation` fraction (parameters,
  optimiser state, target networks, replay buffer, counters, observation and reward normalisation statistics:
  everything except its own environment batch, its recurrent memory of that batch and its key) and that
  member's hyperparameters, and
* explores: multiplies each explored hyperparameter by a factor drawn from `perturb_factors`, clipped to its
  prior's bounds, or with `resample_probability` draws it afresh from its prior.

Hyperparameters are the Config's pytree leaves (`base.hyper`), read by the algorithm at every iteration (the
optimiser is built from `config.learning_rate` inside each update, and Adam's state holds no learning rate), so
a member continues with its new hyperparameters from the next iteration on. Ranking, selection, copying and
perturbation run inside the program: one loop over the iterations, the exploit/explore step after every
`ready`-th (under `lax.cond`, so that the program holds one copy of the iteration, of the evaluation and of the
step, whatever the schedule); no host round trip. No step follows the run's last iteration, so a
population with `ready = num_iterations` is `jax.vmap(base.train)` of its configs and member keys (bit for bit
when both compile without XLA's algebraic simplifier, `run.compile.DEVICE_INDEPENDENT_OPTIONS`: it rewrites
differently nested programs differently, 1 ulp apart). Iterations past the last whole block run at the end,
after a last exploit/explore step.

```python
import jax
from jaxrl import pbt
from jaxrl.algos import ppo

config = ppo.Config(num_envs=16, total_timesteps=500_000)
run = jax.jit(pbt.make_pbt(config, pbt.PBTConfig(population=8, ready=20,
                                                 explore={"learning_rate": "loguniform:1e-4:1e-2"})))
states, metrics, lineage = run(jax.random.key(0))    # metrics[name]: [P, iterations]
pbt.write_lineage_csv(lineage, "lineage.csv")       # one row per member x ready step
pbt.plot_lineage(lineage, "lineage.png")
```

Priors use the sweep syntax: `uniform:LOW:HIGH`, `loguniform:LOW:HIGH` (uniform in log space, LOW > 0) or
`int:LOW:HIGH` (integers, both ends included); a tuple `("log_uniform", low, high)` as `sweep.random` takes
works too. Their [LOW, HIGH] are the bounds perturbations are clipped to.

A run with checkpoints (`run`, `jaxrl pbt ALGO --out DIR`) trains the same schedule in chunks of whole ready
blocks, every chunk the same compiled program (a chunk's length is one of its arguments), saving the population,
its hyperparameters, the metrics and the lineage between them; an interrupted run (Ctrl-C, SIGTERM) resumed with
`run(..., resume=True)` (`jaxrl pbt --resume DIR`) equals the uninterrupted one bit for bit. The members can be
sharded over several devices (`devices`), as a sweep's rows are.

Such a run ends with an evaluation of its best member on fresh episodes (deterministic and stochastic policy,
reported apart, in summary.json), and with `tensorboard=True` (`--tensorboard`) writes TensorBoard event files,
one run per member; `jaxrl eval` on its folder plays every member of the latest checkpoint.

Modules: `population` (priors, validation, the exploit/explore step), `program` (the compiled schedule, whole or
in chunks), `lineage` (Lineage, lineage.csv, the plot, a population's folder), `runner` (the chunk loop:
checkpoints, resume, progress bar, devices), `evaluate` (the best member's evaluation, `jaxrl eval` on a
population), `board` (TensorBoard). `PBTConfig` and the checks that need no JAX are `jaxrl.pbt_settings`, which
`jaxrl pbt` runs before JAX starts.
"""

from jaxrl.pbt.board import PopulationBoard
from jaxrl.pbt.evaluate import evaluate_best
from jaxrl.pbt.lineage import (
    Lineage,
    folder_info,
    lineage_rows,
    plot_lineage,
    ranking,
    write_folder,
    write_lineage_csv,
    write_metrics_csv,
)
from jaxrl.pbt.population import (
    EVAL_FITNESS_METRIC,
    FITNESS,
    FITNESS_METRIC,
    FOLLOW_PARENT,
    KINDS,
    OWN_FIELDS,
    PBTConfig,
    Prior,
    block_fitness,
    exploit,
    explore,
    fitness_of,
    initial_population,
    parse_prior,
    ranks,
    ready_step,
    select_parents,
    validate,
)
from jaxrl.pbt.program import eval_stream, fire_schedule, make_chunk, make_pbt, make_program, make_start, step_keys
from jaxrl.pbt.runner import PopulationResult, evaluate_folder, resume_settings, run, run_to_folder

__all__ = [
    "EVAL_FITNESS_METRIC",
    "FITNESS",
    "FITNESS_METRIC",
    "FOLLOW_PARENT",
    "KINDS",
    "OWN_FIELDS",
    "Lineage",
    "PBTConfig",
    "PopulationBoard",
    "PopulationResult",
    "Prior",
    "block_fitness",
    "eval_stream",
    "evaluate_best",
    "evaluate_folder",
    "explore",
    "exploit",
    "fire_schedule",
    "fitness_of",
    "folder_info",
    "initial_population",
    "lineage_rows",
    "make_chunk",
    "make_pbt",
    "make_program",
    "make_start",
    "parse_prior",
    "plot_lineage",
    "ranking",
    "ranks",
    "ready_step",
    "resume_settings",
    "run",
    "run_to_folder",
    "select_parents",
    "step_keys",
    "validate",
    "write_folder",
    "write_lineage_csv",
    "write_metrics_csv",
]
