"""PureJaxRL side of `benchmarks.purejaxrl`: `python purejaxrl_worker.py '<spec json>'` prints JSON.

spec: {"case": a name of `purejaxrl_cases.CASES`, "source": the folder holding PureJaxRL's ppo.py and dqn.py,
       "repeats": int}
Runs in PureJaxRL's own venv (gymnax 0.0.9). Its `wrappers.py` imports brax and navix and `dqn.py` imports wandb,
none of which these cases use: empty stand-ins are put in `sys.modules` so that the files run unchanged.
Timing: `benchmarks.common.measure` of `jax.jit(make_train(config))` (vmapped over the case's seeds).
"""

from __future__ import annotations

import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import environment, main  # noqa: E402
from purejaxrl_cases import case  # noqa: E402

from benchmarks.common import measure  # noqa: E402


def stand_ins() -> None:
    """Empty modules for PureJaxRL's unused imports (brax, navix, wandb), and `jax.tree_map` (removed from recent
    jax; `dqn.py` calls it) as `jax.tree.map`."""
    import jax

    if not hasattr(jax, "tree_map"):
        jax.tree_map = jax.tree.map
    for name in ("brax", "brax.envs", "brax.envs.wrappers", "brax.envs.wrappers.training", "navix", "wandb"):
        module = types.ModuleType(name)
        module.EpisodeWrapper = module.AutoResetWrapper = object
        sys.modules.setdefault(name, module)


def ppo_config(c: dict) -> dict:
    return {
        "LR": c["learning_rate"],
        "NUM_ENVS": c["num_envs"],
        "NUM_STEPS": c["num_steps"],
        "TOTAL_TIMESTEPS": c["total_timesteps"],
        "UPDATE_EPOCHS": c["update_epochs"],
        "NUM_MINIBATCHES": c["num_minibatches"],
        "GAMMA": c["gamma"],
        "GAE_LAMBDA": c["gae_lambda"],
        "CLIP_EPS": c["clip_eps"],
        "ENT_COEF": c["ent_coef"],
        "VF_COEF": c["vf_coef"],
        "MAX_GRAD_NORM": c["max_grad_norm"],
        "ACTIVATION": "tanh",
        "ENV_NAME": "CartPole-v1",
        "ANNEAL_LR": True,
        "DEBUG": False,
    }


def dqn_config(c: dict) -> dict:
    return {
        "NUM_ENVS": c["num_envs"],
        "BUFFER_SIZE": c["buffer_size"],
        "BUFFER_BATCH_SIZE": c["batch_size"],
        "TOTAL_TIMESTEPS": c["total_timesteps"],
        "EPSILON_START": c["epsilon_start"],
        "EPSILON_FINISH": c["epsilon_end"],
        "EPSILON_ANNEAL_TIME": c["epsilon_anneal_steps"],
        "TARGET_UPDATE_INTERVAL": c["target_update_interval"],
        "LR": c["learning_rate"],
        "LEARNING_STARTS": c["learning_starts"],
        "TRAINING_INTERVAL": c["num_envs"],
        "LR_LINEAR_DECAY": False,
        "GAMMA": c["gamma"],
        "TAU": 1.0,
        "ENV_NAME": "CartPole-v1",
        "SEED": 0,
        "NUM_SEEDS": 1,
        "WANDB_MODE": "disabled",
    }


def final_return(algo: str, metrics, config: dict) -> float:
    """PPO: the mean return of the episodes that ended in the last 10% of updates; DQN: the mean of its logged
    `returns` (each env's last finished episode) over the last 10% of updates."""
    import numpy as np

    if algo == "ppo":
        returns, done = (np.asarray(metrics[k]) for k in ("returned_episode_returns", "returned_episode"))
        last = max(1, returns.shape[-3] // 10)
        returns, done = returns[..., -last:, :, :], done[..., -last:, :, :]
        return float(returns[done].mean()) if done.any() else float("nan")
    returns = np.asarray(metrics["returns"])
    return float(returns[..., -max(1, returns.shape[-1] // 10) :].mean())


def run(spec: dict) -> dict:
    import jax

    stand_ins()
    sys.path.insert(0, spec["source"])
    algo, c, seeds, _ = case(spec["case"])
    if algo == "ppo":
        import ppo as module

        config = ppo_config(c)
        steps = int(config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"])
        steps *= config["NUM_STEPS"] * config["NUM_ENVS"]
    else:
        import dqn as module

        config = dqn_config(c)
        steps = int(config["TOTAL_TIMESTEPS"] // config["NUM_ENVS"]) * config["NUM_ENVS"]
    train = module.make_train(config)
    key = jax.random.PRNGKey(0)
    if seeds > 1:
        train, key = jax.vmap(train), jax.random.split(key, seeds)
    compile_s, run_s, out = measure(train, key, repeats=spec["repeats"])
    return {
        "compile_s": compile_s,
        "run_s": run_s,
        "env_steps": steps * seeds,
        "steps_per_s": steps * seeds / run_s,
        "final_return": final_return(algo, out["metrics"], config),
        "environment": environment(),
    }


if __name__ == "__main__":
    main(run)
