"""jaxrl side of `benchmarks.peers`: `python benchmarks/peer_workers/jaxrl_worker.py '<spec json>'` prints JSON.

spec: {"algo": "ppo" | "dqn", "config": <library-neutral config, see benchmarks.peers>, "seed": int, "calls": int,
       "curve": bool, "seeds": int, "eval_every": int, "eval_episodes": int, "threshold": float}

throughput: `jax.jit(make_train(config))` of one seed, compile seconds and the best of `calls` calls
(`benchmarks.common.measure`).
curve (when spec["curve"]): `jax.jit(jax.vmap(train_with_eval))` over `seeds` keys, where `train_with_eval`
is `init` + a `lax.scan` of (eval_every env steps of `update`, then `jaxrl.run.evaluate` of `eval_episodes` fresh
episodes with the current policy, actions sampled as rejax's evaluation samples them: PPO from the policy,
DQN epsilon-greedy at 0.005). The training episodes' returns are reported too (`train_return_recent*`:
`jaxrl.run.report.final_return`, the episodes that ended in the last 10% of iterations).
"""

from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import curve_summary, environment, main  # noqa: E402

from benchmarks.common import env_steps, mean_final_return, measure  # noqa: E402

EVAL_EPSILON = 0.005  # rejax's DQN.make_act


def jaxrl_config(algo: str, c: dict) -> dict:
    """The jaxrl Config fields for the library-neutral config `c` (plain Python, importable anywhere)."""
    if algo == "ppo":
        return dict(
            env=c["env"],
            num_envs=c["num_envs"],
            num_steps=c["num_steps"],
            total_timesteps=c["total_timesteps"],
            update_epochs=c["epochs"],
            num_minibatches=c["minibatches"],
            hidden_sizes=tuple(c["hidden"]),
            activation=c["activation"],
            anneal_lr=False,  # rejax has no learning-rate schedule
            clip_value_loss=True,
            normalize_advantages=True,
            learning_rate=c["learning_rate"],
            gamma=c["gamma"],
            gae_lambda=c["gae_lambda"],
            clip_eps=c["clip_eps"],
            ent_coef=c["ent_coef"],
            vf_coef=c["vf_coef"],
            max_grad_norm=c["max_grad_norm"],
        )
    if algo == "dqn":
        return dict(
            env=c["env"],
            num_envs=c["num_envs"],
            num_steps=1,  # rejax's DQN iteration: one step of every env, then its gradient steps
            total_timesteps=c["total_timesteps"],
            buffer_size=c["buffer_size"],
            replay_batch_size=c["batch_size"],
            updates_per_iteration=c["updates_per_iteration"],
            learning_starts=c["learning_starts"],
            target_update_interval=1,
            tau=c["tau"],
            double=c["double"],
            dueling=c["dueling"],
            n_step=1,
            prioritized=False,
            hidden_sizes=tuple(c["hidden"]),
            activation="silu" if c["activation"] == "swish" else c["activation"],
            layer_norm=False,
            td_loss="l2",
            learning_rate=c["learning_rate"],
            gamma=c["gamma"],
            epsilon_start=c["epsilon_start"],
            epsilon_end=c["epsilon_end"],
            epsilon_decay_fraction=c["exploration_fraction"],
            max_grad_norm=c["max_grad_norm"],
        )
    raise ValueError(f"algo {algo!r} is not one of ppo, dqn")


def train_with_eval(module, config, eval_iterations: int, eval_episodes: int, eval_policy):
    """`train(key) -> (eval mean returns [evals], training episode returns [iterations])`."""
    import jax
    import jax.numpy as jnp

    from jaxrl.algos import base
    from jaxrl.run.evaluate import evaluate

    num_evals = config.num_iterations // eval_iterations

    def train(key):
        init_key, eval_key = jax.random.split(key)
        setup = base.make_setup(config, module)
        state = base.initial_state(config, init_key, setup, module)

        def chunk(state, key):
            state, metrics = jax.lax.scan(
                lambda s, _: base.step(module, setup, config, s), state, None, length=eval_iterations
            )
            act, normalize = eval_policy(state)
            result = evaluate(config.env, act, key, eval_episodes, normalize=normalize)
            return state, (result["mean_return"], metrics["episode_return"])

        _, (eval_returns, train_returns) = jax.lax.scan(chunk, state, jax.random.split(eval_key, num_evals))
        return eval_returns, jnp.reshape(train_returns, (-1,))

    return train


def recent_return(episode_returns):
    """The final return (`jaxrl.run.report.final_return`: the training episodes that ended in the last 10% of
    iterations) of each run in `episode_returns` [..., iterations], averaged over runs; None when none ended there."""
    value = mean_final_return(episode_returns)
    return None if math.isnan(value) else value


def run(spec: dict) -> dict:
    import jax

    import jaxrl
    from jaxrl.algos import base, dqn, ppo
    from jaxrl.algos.families import q_learning

    algo = spec["algo"]
    module = {"ppo": ppo, "dqn": dqn}[algo]
    config = module.Config(**jaxrl_config(algo, spec["config"]))
    train = module.make_train(config)  # validates
    steps = env_steps(config)
    key = jax.random.key(spec.get("seed", 0))
    compile_s, run_s, (_, metrics) = measure(train, key, repeats=spec.get("calls", 1))
    result = {
        "library": "jaxrl",
        "version": getattr(jaxrl, "__version__", "checkout"),
        "algo": algo,
        "env_steps": steps,
        "compile_s": compile_s,
        "run_s": run_s,
        "steps_per_s": steps / run_s,
        "train_return_recent": recent_return(metrics["episode_return"]),
        **environment(),
    }
    if not spec.get("curve"):
        return result

    steps_per_iteration = config.env_steps_per_iteration
    eval_every = spec["eval_every"]
    if eval_every % steps_per_iteration or config.num_iterations * steps_per_iteration % eval_every:
        raise ValueError(f"eval_every={eval_every} must divide the run into whole iterations and evaluations")
    if algo == "ppo":

        def eval_policy(state):
            return base.evaluation_policy(config, state, deterministic=False, algo=ppo)
    else:
        network = dqn.setup(config).network

        def eval_policy(state):
            return q_learning.q_evaluation_policy(network, state.params, state.env.state, EVAL_EPSILON, False)

    curve_train = train_with_eval(
        module, config, eval_every // steps_per_iteration, spec.get("eval_episodes", 128), eval_policy
    )
    keys = jax.random.split(key, spec["seeds"])
    compile_s, run_s, (eval_returns, train_returns) = measure(jax.vmap(curve_train), keys)
    result["curve"] = {
        "seeds": spec["seeds"],
        "compile_s": compile_s,
        "run_s": run_s,
        "steps_per_s": spec["seeds"] * steps / run_s,
        "train_return_recent_mean": recent_return(train_returns),
        **curve_summary(eval_returns, eval_every, spec["threshold"]),
    }
    return result


if __name__ == "__main__":
    main(run)
