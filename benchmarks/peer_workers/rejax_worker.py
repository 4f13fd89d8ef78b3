"""rejax side of `benchmarks.peers`, run with the python of rejax's own venv (`benchmarks/.venv-rejax`):
`python benchmarks/peer_workers/rejax_worker.py '<spec json>'` prints JSON. Imports no jaxrl.

throughput: `jax.jit(algo.train)` of one seed with evaluation reduced to one at the end
(`eval_freq = total_timesteps`, `skip_initial_evaluation=True`): compile seconds and the best of `calls` calls
(`benchmarks.common.measure`).
curve (when spec["curve"]): `jax.jit(jax.vmap(algo.train))(keys)` (rejax's way to run seeds) with
`eval_freq = eval_every`, `skip_initial_evaluation=True`. rejax's `train` returns, per evaluation, the lengths
and returns of 128 episodes played by `algo.make_act` (PPO: actions sampled from the policy; DQN:
epsilon-greedy at 0.005), from `rejax.evaluate.evaluate`; the curve is their mean.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import curve_summary, environment, main  # noqa: E402

from benchmarks.common import measure  # noqa: E402


def rejax_config(algo: str, c: dict) -> dict:
    """The keyword arguments of rejax's `PPO.create` / `DQN.create` for the library-neutral config `c`."""
    if algo == "ppo":
        return dict(
            env=c["env"],
            agent_kwargs={"activation": c["activation"], "hidden_layer_sizes": tuple(c["hidden"])},
            num_envs=c["num_envs"],
            num_steps=c["num_steps"],
            num_epochs=c["epochs"],
            num_minibatches=c["minibatches"],
            learning_rate=c["learning_rate"],
            max_grad_norm=c["max_grad_norm"],  # rejax: optax.clip, element-wise
            total_timesteps=c["total_timesteps"],
            gamma=c["gamma"],
            gae_lambda=c["gae_lambda"],
            clip_eps=c["clip_eps"],
            ent_coef=c["ent_coef"],
            vf_coef=c["vf_coef"],
        )
    if algo == "dqn":
        if tuple(c["hidden"]) != (64, 64):
            raise ValueError("rejax's DQN fixes hidden_layer_sizes=(64, 64)")
        return dict(
            env=c["env"],
            agent="DuelingQNetwork" if c["dueling"] else "QNetwork",
            agent_kwargs={"activation": c["activation"]},
            num_envs=c["num_envs"],
            buffer_size=c["buffer_size"],
            fill_buffer=c["learning_starts"],
            batch_size=c["batch_size"],
            num_epochs=c["updates_per_iteration"],
            learning_rate=c["learning_rate"],
            max_grad_norm=c["max_grad_norm"],
            total_timesteps=c["total_timesteps"],
            target_update_freq=1,
            polyak=1.0 - c["tau"],
            eps_start=c["epsilon_start"],
            eps_end=c["epsilon_end"],
            exploration_fraction=c["exploration_fraction"],
            gamma=c["gamma"],
            ddqn=c["double"],
        )
    raise ValueError(f"algo {algo!r} is not one of ppo, dqn")


def run(spec: dict) -> dict:
    from importlib.metadata import version

    import jax
    import numpy as np
    import rejax

    algo = spec["algo"]
    cls = {"ppo": rejax.PPO, "dqn": rejax.DQN}[algo]
    kwargs = rejax_config(algo, spec["config"])
    total = spec["config"]["total_timesteps"]
    key = jax.random.key(spec.get("seed", 0))

    algo_obj = cls.create(**kwargs, eval_freq=total, skip_initial_evaluation=True)
    compile_s, run_s, (_, (_, final_eval)) = measure(algo_obj.train, key, repeats=spec.get("calls", 1))
    result = {
        "library": "rejax",
        "version": version("rejax"),
        "gymnax": version("gymnax"),
        "algo": algo,
        "env_steps": total,
        "compile_s": compile_s,
        "run_s": run_s,
        "steps_per_s": total / run_s,
        "final_eval_return": float(np.asarray(final_eval)[-1].mean()),
        **environment(),
    }
    if not spec.get("curve"):
        return result

    algo_obj = cls.create(**kwargs, eval_freq=spec["eval_every"], skip_initial_evaluation=True)
    keys = jax.random.split(key, spec["seeds"])
    compile_s, run_s, (_, (_, eval_returns)) = measure(jax.vmap(algo_obj.train), keys)
    eval_returns = np.asarray(eval_returns).mean(axis=-1)  # [seeds, evals, episodes] -> [seeds, evals]
    result["curve"] = {
        "seeds": spec["seeds"],
        "compile_s": compile_s,
        "run_s": run_s,
        "steps_per_s": spec["seeds"] * total / run_s,
        **curve_summary(eval_returns, spec["eval_every"], spec["threshold"]),
    }
    return result


if __name__ == "__main__":
    main(run)
