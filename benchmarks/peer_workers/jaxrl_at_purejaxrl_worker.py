"""jaxrl side of `benchmarks.purejaxrl`: `python jaxrl_at_purejaxrl_worker.py '<spec json>'` prints JSON.

spec: {"case": a name of `purejaxrl_cases.CASES`, "repeats": int, "devices": int (optional, default the case's),
"cpu_threads": int (optional: `jaxrl.sweep.devices.use_cpu_threads`)}
The case's config as jaxrl Config fields (PPO: `ppo.Config`; DQN: `dqn.Config` with PureJaxRL's 120-84 relu
network, no gradient clipping, target copy and learning start in jaxrl's units); timing: `benchmarks.common.measure`
of `jax.jit(make_train(config, devices))` for one seed (data-parallel over `devices`), `jax.jit(jax.vmap(make_train(
config)))` for several, their keys sharded over `devices` (whole seeds per device, a sweep's layout), compiled with
the XLA options of jaxrl's runner (`jaxrl.run.compile.compiler_options`). distrax is imported before the clock
starts, as PureJaxRL's modules import it on import: the compile seconds are tracing, lowering and XLA, no imports.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import environment, main  # noqa: E402
from purejaxrl_cases import case  # noqa: E402

from benchmarks.common import env_steps, mean_final_return, measure  # noqa: E402


def jaxrl_config(algo: str, c: dict):
    from jaxrl.algos import dqn, ppo

    if algo == "ppo":
        return ppo.Config(env="CartPole-v1", anneal_lr=True, clip_value_loss=True, **c)
    return dqn.Config(
        env="CartPole-v1",
        num_envs=c["num_envs"],
        num_steps=1,
        total_timesteps=c["total_timesteps"],
        hidden_sizes=(120, 84),
        activation="relu",
        buffer_size=c["buffer_size"],
        replay_batch_size=c["batch_size"],
        learning_starts=c["learning_starts"],
        target_update_interval=c["target_update_interval"] // c["num_envs"],  # iterations of num_envs env steps
        learning_rate=c["learning_rate"],
        max_grad_norm=float("inf"),  # PureJaxRL's DQN does not clip its gradients
        gamma=c["gamma"],
        epsilon_start=c["epsilon_start"],
        epsilon_end=c["epsilon_end"],
        epsilon_decay_fraction=c["epsilon_anneal_steps"] / c["total_timesteps"],
    )


def runner_options() -> dict | None:
    """The XLA options jaxrl's runner compiles with (`jaxrl.run.compile.compiler_options`; none before it had any)."""
    try:
        from jaxrl.run.compile import compiler_options
    except ImportError:
        return None
    return compiler_options()


def run(spec: dict) -> dict:
    if spec.get("cpu_threads"):  # before JAX starts its backend
        from jaxrl.sweep.devices import use_cpu_threads

        use_cpu_threads(spec["cpu_threads"])
    import jax

    from jaxrl.algos import base

    algo, c, seeds, devices = case(spec["case"])
    devices = spec.get("devices", devices)
    config = jaxrl_config(algo, c)
    import distrax  # noqa: F401  (jaxrl imports it when a policy is first traced; PureJaxRL's modules on import)

    key = jax.random.key(0)
    if seeds > 1:  # whole seeds per device, as a sweep lays them out
        train, key = jax.vmap(base.make_train(config)), jax.random.split(key, seeds)
        if devices > 1:
            import numpy as np
            from jax.sharding import Mesh, NamedSharding, PartitionSpec

            mesh = Mesh(np.array(jax.devices()[:devices]), ("seeds",))
            key = jax.device_put(key, NamedSharding(mesh, PartitionSpec("seeds")))
    else:  # one run: data-parallel over the devices
        train = base.make_train(config, devices=devices)
    options = runner_options()
    compile_s, run_s, (_, metrics) = measure(train, key, repeats=spec["repeats"], compiler_options=options)
    steps = env_steps(config, seeds)
    return {
        "compile_s": compile_s,
        "run_s": run_s,
        "env_steps": steps,
        "steps_per_s": steps / run_s,
        "final_return": mean_final_return(metrics["episode_return"]),
        "environment": environment(),
        "compiler_options": options,
        "jaxrl_source": os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(base.__file__)))),
    }


if __name__ == "__main__":
    main(run)
