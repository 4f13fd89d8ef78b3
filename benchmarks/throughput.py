"""Throughput of jaxrl on CPU/accelerator, all measured in one process so the ratios are comparable.

For each num_envs, with the same number of env steps S = iterations * num_steps * num_envs:
  (a0) env-only, random actions: jit(lax.scan) of the VecEnv (episode statistics included);
  (a)  env-only, actions sampled by PPO's actor forward pass (params from ppo.init), no learning, no critic;
  (b)  PPO's rollout phase alone: `rollout.rollout` as `ppo.update` calls it (trajectory stored, critic on
       the observations and final observations after the scan), scanned over `iterations` with fixed params;
  (c)  PPO training: `ppo.make_train` for `iterations` iterations.
Then (d) PPO at PureJaxRL's default CartPole config, and (e) `jit(vmap)` of (d) over 8 seeds.

The value-based algorithms (DQN, PQN, SARSA) at their default configs (`--value-steps` env steps each), with the
limits measured for their own shape (num_envs, iterations x num_steps) in the same run:
  (v0) env-only, random actions;  (v1) env-only, actions of the algorithm's epsilon-greedy Q-network forward pass;
  (vt) training: `make_train(config)`; its ratios to (v1) (`vs_a`) and to (v0) (`vs_env`).
`--algos` picks the algorithms (default: all).

Compile and run seconds as `benchmarks.common.measure` defines them: `jax.jit(f).lower(*args).compile()` (tracing
included), and the best of `--repeats` calls of the compiled function. Final return: `jaxrl.run.report.final_return`
(the last 10% of iterations), averaged over seeds. Usage: `python -m benchmarks.throughput [--quick]`.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from benchmarks.common import env_steps, machine, mean_final_return, measure, write_json
from benchmarks.peer_workers import purejaxrl_cases
from jaxrl import rollout as rollout_lib
from jaxrl.algos import dqn, ppo, pqn, sarsa
from jaxrl.algos.families import actor_critic

VALUE_BASED = {"dqn": dqn, "pqn": pqn, "sarsa": sarsa}
MAX_STEPS = 3_000_000  # iterations are scaled down so that one measured run has at most this many env steps
PUREJAXRL = dict(purejaxrl_cases.PPO, anneal_lr=True, clip_value_loss=True)  # PureJaxRL's CartPole PPO


def random_act(spec):
    def act(obs, key):
        n = obs.shape[0]
        if spec.discrete:
            action = jax.random.randint(key, (n,), 0, spec.action_dim)
        else:
            action = jax.random.uniform(key, (n, spec.action_dim), minval=spec.action_low, maxval=spec.action_high)
        return action, jnp.zeros(n)

    return act


def env_loop(env, make_act, length: int):
    """`(params, carry, key) -> checksum`: `length` steps of `env` driven by `make_act(params)`; no storage."""

    def run(params, carry, key):
        act = make_act(params)

        def step(state, step_key):
            carry, total = state
            act_key, env_key = jax.random.split(step_key)
            action, log_prob = act(carry.obs, act_key)
            obs, env_state, reward, *_ = env.step(env_key, carry.state, action)
            total = total + reward.sum() + log_prob.sum()  # keeps the forward pass alive
            return (rollout_lib.EnvCarry(env_state, obs), total), None

        (_, total), _ = jax.lax.scan(step, (carry, jnp.zeros(())), jax.random.split(key, length))
        return total

    return run


def rollout_loop(config: ppo.Config, iterations: int):
    """`(params, carry, key) -> checksum`: `iterations` calls of `rollout.rollout` exactly as in `ppo.update`."""
    setup = ppo.setup(config)
    env, network = setup.env, setup.network

    def run(params, carry, key):
        act, value = actor_critic.behaviour(network, params)

        def iteration(carry, iteration_key):
            carry, traj = rollout_lib.rollout(env, act, value, carry, iteration_key, config.num_steps)
            return carry, sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(traj))

        return jax.lax.scan(iteration, carry, jax.random.split(key, iterations))[1].sum()

    return run


def row(case, num_envs, steps, compile_s, run_s, **extra):
    return {
        "case": case,
        "num_envs": num_envs,
        "steps": steps,
        "compile_s": compile_s,
        "run_s": run_s,
        "steps_per_s": steps / run_s,
        **extra,
    }


def bench_num_envs(args, num_envs: int, key) -> list[dict]:
    batch = num_envs * args.num_steps
    iterations = max(1, min(max(args.iterations, -(-args.min_steps // batch)), MAX_STEPS // batch))
    steps = iterations * args.num_steps * num_envs
    config = ppo.Config(
        env=args.env,
        num_envs=num_envs,
        num_steps=args.num_steps,
        total_timesteps=steps,
        update_epochs=4,
        num_minibatches=4,
    )
    setup = ppo.setup(config)
    env, network = setup.env, setup.network
    state = ppo.init(setup, config, key)
    loop_args = (state.params, state.env, key)
    length = iterations * args.num_steps
    extra = {"iterations": iterations, "num_steps": args.num_steps}

    random_loop = env_loop(env, lambda params: random_act(env.spec), length)
    a0 = row(
        "a0 env, random actions", num_envs, steps, *measure(random_loop, *loop_args, repeats=args.repeats)[:2], **extra
    )
    policy_loop = env_loop(env, lambda params: actor_critic.behaviour(network, params)[0], length)
    a = row(
        "a env + policy forward", num_envs, steps, *measure(policy_loop, *loop_args, repeats=args.repeats)[:2], **extra
    )
    b = row(
        "b PPO rollout phase",
        num_envs,
        steps,
        *measure(rollout_loop(config, iterations), *loop_args, repeats=args.repeats)[:2],
        **extra,
    )
    compile_s, run_s, (_, metrics) = measure(ppo.make_train(config), key, repeats=args.repeats)
    final = mean_final_return(metrics["episode_return"])
    c = row("c PPO train", num_envs, steps, compile_s, run_s, final_return=final, **extra)
    for r in (a0, a, b, c):
        r["vs_a"] = r["steps_per_s"] / a["steps_per_s"]
    c["rollout_share"] = b["run_s"] / c["run_s"]  # fraction of training time spent in the rollout phase
    return [a0, a, b, c]


def bench_purejaxrl(args, key) -> list[dict]:
    config = ppo.Config(env=args.env, **PUREJAXRL)
    train = ppo.make_train(config)
    steps = env_steps(config)
    compile_s, run_s, (_, metrics) = measure(train, key, repeats=args.repeats)
    d = row(
        "d PPO, PureJaxRL config",
        config.num_envs,
        steps,
        compile_s,
        run_s,
        final_return=mean_final_return(metrics["episode_return"]),
        iterations=config.num_iterations,
        num_steps=config.num_steps,
    )
    if args.quick:
        return [d]
    seeds = 8
    compile_s, run_s, (_, metrics) = measure(jax.vmap(train), jax.random.split(key, seeds), repeats=args.repeats)
    e = row(
        f"e same, jit(vmap) {seeds} seeds",
        config.num_envs,
        seeds * steps,
        compile_s,
        run_s,
        final_return=mean_final_return(metrics["episode_return"]),
        iterations=config.num_iterations,
        num_steps=config.num_steps,
        seeds=seeds,
    )
    e["vs_one_seed"] = e["steps_per_s"] / d["steps_per_s"]
    return [d, e]


def bench_value(args, name: str, key) -> list[dict]:
    """(v0) env with random actions, (v1) env + the epsilon-greedy Q-network forward, (vt) training, for the
    value-based algorithm `name` at its default config, all with the same env steps."""
    module = VALUE_BASED[name]
    config = module.Config(env=args.env)
    if args.value_steps:
        config = dataclasses.replace(config, total_timesteps=args.value_steps)
    module.validate(config)
    steps = env_steps(config)
    setup = module.setup(config)
    env, network = setup.env, setup.network
    state = module.init(setup, config, key)
    loop_args = (state.params, state.env, key)
    length = config.num_iterations * config.num_steps
    extra = {"algo": name, "iterations": config.num_iterations, "num_steps": config.num_steps}

    random_loop = env_loop(env, lambda params: random_act(env.spec), length)
    v0 = row(
        f"v0 env, random actions ({name} shape)",
        config.num_envs,
        steps,
        *measure(random_loop, *loop_args, repeats=args.repeats)[:2],
        **extra,
    )
    policy_loop = env_loop(env, lambda params: dqn.behaviour(network, params, config.epsilon_end), length)
    v1 = row(
        f"v1 env + {name} Q forward",
        config.num_envs,
        steps,
        *measure(policy_loop, *loop_args, repeats=args.repeats)[:2],
        **extra,
    )
    compile_s, run_s, (_, metrics) = measure(module.make_train(config), key, repeats=args.repeats)
    vt = row(f"vt {name.upper()} train", config.num_envs, steps, compile_s, run_s, **extra)
    vt["final_return"] = mean_final_return(metrics["episode_return"])
    for r in (v0, v1, vt):
        r["vs_a"] = r["steps_per_s"] / v1["steps_per_s"]
        r["vs_env"] = r["steps_per_s"] / v0["steps_per_s"]
    return [v0, v1, vt]


def fmt(value, spec):
    return "" if value is None else format(value, spec)


def table(rows: list[dict]) -> str:
    lines = [
        "| num_envs | case | iters x steps | env steps | compile s | run s | env steps/s | vs (a) | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        note = []
        if "vs_env" in r and r["vs_env"] != 1.0:
            note.append(f"{r['vs_env']:.3f}x env-only")
        if "rollout_share" in r:
            note.append(f"rollout {r['rollout_share']:.0%} of train time")
        if "vs_one_seed" in r:
            note.append(f"{r['vs_one_seed']:.2f}x one seed")
        if "final_return" in r:
            note.append(f"final return {r['final_return']:.0f}")
        lines.append(
            f"| {r['num_envs']} | {r['case']} | {r['iterations']} x {r['num_steps']} | {r['steps']:,} | "
            f"{r['compile_s']:.1f} | {r['run_s']:.3f} | {r['steps_per_s'] / 1e6:.3f}M | "
            f"{fmt(r.get('vs_a'), '.2f')} | {'; '.join(note)} |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[16, 256, 2048])
    parser.add_argument("--num-steps", type=int, default=64)
    parser.add_argument(
        "--iterations",
        type=int,
        default=20,
        help=f"PPO iterations per measured run; more where needed to reach --min-steps, "
        f"fewer where it would exceed {MAX_STEPS:,} env steps",
    )
    parser.add_argument(
        "--min-steps",
        type=int,
        default=2**18,
        help="env steps per measured run at least, so small num_envs are not timed in milliseconds",
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/throughput.json")
    parser.add_argument(
        "--algos",
        nargs="+",
        choices=["ppo", *VALUE_BASED],
        default=["ppo", *VALUE_BASED],
        help="algorithms to measure (the JSON holds only these)",
    )
    parser.add_argument(
        "--value-steps",
        type=int,
        default=None,
        help="env steps of each value-based run (default: each Config's total_timesteps; --quick: 32768)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="num_envs 16 256, 10 iterations, min steps 65536, no vmap over seeds"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.num_envs, args.iterations, args.min_steps = [16, 256], 10, 2**16
        args.value_steps = args.value_steps or 2**15

    start = time.perf_counter()
    jax.block_until_ready(jax.jit(lambda x: x + 1)(jnp.ones(())))  # warm up the backend
    key = jax.random.key(0)
    info, out = machine(), Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    sections = []
    if "ppo" in args.algos:
        sections += [lambda n=n: bench_num_envs(args, n, key) for n in args.num_envs]
        sections += [lambda: bench_purejaxrl(args, key)]
    sections += [lambda name=name: bench_value(args, name, key) for name in VALUE_BASED if name in args.algos]
    for section in sections:
        new = section()
        print(table(new).split("\n", 2)[2], flush=True)
        rows += new
        wall_s = time.perf_counter() - start  # the JSON is rewritten after each section, so a stall loses one
        write_json(
            out,
            {
                "date": datetime.datetime.now().isoformat(timespec="seconds"),
                "machine": info,
                "args": vars(args),
                "wall_s": wall_s,
                "results": rows,
            },
        )

    print(
        f"\n## jaxrl throughput, {args.env} ({datetime.date.today()}; {info['processor']}, "
        f"{info['cpu_count']} CPUs; jax {info['jax']} {info['devices']}; total {wall_s:.0f} s)\n"
    )
    print(table(rows))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
