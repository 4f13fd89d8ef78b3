"""Where one device's time goes: jaxrl's steps against the limits they cannot beat, each a ratio from one run.

    python -m benchmarks.limits            # PureJaxRL's CartPole configs (PPO 4 envs x 128 steps; DQN 10 envs)
    python -m benchmarks.limits --quick    # fewer iterations

(a) Rollout, at 4 and 2048 envs: `rollout.rollout` as PPO's update calls it (the critic after the scan, the
    truncation bootstrap) against the env-only limit (random actions), the env + policy-forward limit (the
    actor's forward pass and sampling, nothing stored) and the env + policy-and-critic-forward limit (the same and
    the critic on every observation, which GAE needs), `benchmarks.throughput.env_loop`. The four programs are
    compiled first, then called in turn, the order reversed every round (2 x `--repeats` rounds): each case's
    best call. And the ceiling the critic puts on the rollout (`critic_ceiling`): its forward pass's FLOPs at
    the peak rate of section (f), added to the env + policy-forward limit's time.
(b) PPO's update phase: `update_epochs` x `num_minibatches` minibatch steps of jaxrl (`ppo.loss_fn` through
    `actor_critic.minibatch_updates`) against the same steps written as plainly as possible: a flax 2 x 64 tanh
    actor and critic, distrax's categorical, the clipped surrogate and the clipped value loss, an entropy bonus,
    `optax.chain(clip_by_global_norm, adam)`, shuffled minibatches in a `lax.scan` (PureJaxRL's shape).
(c) One DQN iteration (`dqn.update`, learning on) against its parts, each scanned alone the same number of
    times: the epsilon-greedy env step, the replay add, the replay sample, the gradient step (which draws its
    own sample, so the sum of the parts counts the sample once), the target copy (compiled first, then called in
    turn as in (a)).
(d) Compile seconds split into tracing + lowering (`jax.jit(f).lower`) and XLA (`.compile()`) for PPO's and
    DQN's whole train and a 12-point learning-rate sweep of PPO (`jax.vmap` over Configs).
(e) Two cuts, each against what it replaces, alternating A, B, B, A: the minibatch shuffle
    (`shuffle.permutation` against `jax.random.permutation`, the same order), and the optimiser over one flat
    vector (`optax.flatten` of the clipping and Adam) against one per parameter leaf, in PPO's minibatch steps and
    DQN's gradient step (other last bits).
(f) The products' floor: PPO's minibatch step and DQN's gradient step, jaxrl's and the plain ones (PureJaxRL's
    shapes), each against the matrix products its program must do, each timed alone and summed
    (`benchmarks.products`): how far above its arithmetic each step runs, and the GFLOP/s of both; and each step's
    FLOPs at the rate of one large product alone (the core's peak, `peak_gflops`).
(g) PPO over 8 seeds vmapped in one program: section (a)'s rollout cases at 4 envs and jaxrl's minibatch step
    against its products (section (f)), both vmapped, and the bound they make: env steps/s if an iteration were
    the faster rollout plus the products of its minibatch steps alone.
Every program's size is its HLO instruction count outside fusions (`ops`): the operations the CPU runtime
dispatches one by one. Results: `benchmarks/results/limits.{json,md}`.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import os
import time
from collections.abc import Callable
from typing import NamedTuple

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from benchmarks import products
from benchmarks.common import machine, write_json
from benchmarks.throughput import PUREJAXRL, env_loop, random_act
from jaxrl import minibatch, optim, replay, shuffle
from jaxrl import rollout as rollout_lib
from jaxrl.algos import dqn, ppo
from jaxrl.algos.base import train as base_train
from jaxrl.algos.families import actor_critic, q_learning
from jaxrl.sweep.devices import use_cpu_threads

RESULTS = os.path.join(os.path.dirname(__file__), "results", "limits")
DQN_CONFIG = dict(
    num_envs=10,
    num_steps=1,
    total_timesteps=500_000,
    hidden_sizes=(120, 84),
    activation="relu",
    max_grad_norm=float("inf"),  # PureJaxRL's DQN does not clip
    learning_starts=10,
    target_update_interval=50,
    epsilon_decay_fraction=0.5,
)


def ops(compiled) -> int:
    """HLO instructions outside fused computations in `compiled`'s optimised module."""
    count, inside_fusion = 0, False
    for line in compiled.as_text().splitlines():
        stripped = line.strip()
        if stripped.endswith("{") and ("(" in stripped or stripped.startswith("ENTRY")):
            inside_fusion = "fus" in stripped.split(" ")[0] or "fused" in stripped.split("(")[0]
        elif " = " in stripped and not inside_fusion:
            count += 1
    return count


def compiled_with_seconds(fn, *args) -> tuple:
    """(`jax.jit(fn)` compiled for `args`, {"trace_s": tracing + lowering, "xla_s": XLA, "ops": `ops`})."""
    start = time.perf_counter()
    lowered = jax.jit(fn).lower(*args)
    lower_s = time.perf_counter() - start
    compiled = lowered.compile()
    compile_s = time.perf_counter() - start - lower_s
    return compiled, {"trace_s": lower_s, "xla_s": compile_s, "ops": ops(compiled)}


def seconds_of_call(compiled, *args) -> float:
    start = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    return time.perf_counter() - start


def timed(fn, *args, repeats: int) -> dict:
    """Compiles `jax.jit(fn)` (tracing + lowering, then XLA) and runs it `repeats` times: the best run."""
    compiled, seconds = compiled_with_seconds(fn, *args)
    return {**seconds, "run_s": min(seconds_of_call(compiled, *args) for _ in range(repeats))}


def timed_alternating(fns: dict, *args, rounds: int) -> dict:
    """Each of `fns` (name: fn) compiled, then called once per round in alternating order (A, B, ..., then
    ..., B, A): {name: `timed`'s dict}, each with the best of its `rounds` calls. A load that comes and goes
    during the run falls on every case alike, so the ratios between them hold where one case after the other
    would not."""
    compiled = {name: compiled_with_seconds(fn, *args) for name, fn in fns.items()}
    calls = {name: [] for name in fns}
    names = list(fns)
    for round_ in range(max(1, rounds)):
        for name in names if round_ % 2 == 0 else names[::-1]:
            calls[name].append(seconds_of_call(compiled[name][0], *args))
    return {name: {**compiled[name][1], "run_s": min(calls[name]), "run_s_all": calls[name]} for name in names}


# ------------------------------------------------------------------------------------------------- (a) rollout


POLICY_CASE = "env + policy forward"
ACTOR_CRITIC_CASE = "env + policy and critic forward"
ROLLOUT_CASE = "jaxrl rollout (critic, bootstrap, stored)"


def seeds_of(fn, seeds: int):
    """`fn(params, carry, key)` over `seeds` stacked params and carries in one program (`jax.vmap`, a key each)."""
    if seeds == 1:
        return fn
    return lambda params, carry, key: jax.vmap(fn)(params, carry, jax.random.split(key, seeds))


def stacked(tree, seeds: int):
    """`seeds` copies of every leaf of `tree` along a new leading axis (as many seeds' states)."""
    return tree if seeds == 1 else jax.tree.map(lambda x: jnp.stack([x] * seeds), tree)


def critic_mflop(setup, params, config) -> float:
    """MFLOP of the critic's forward pass over one rollout's T + 1 observations of every env (`rollout.values_of`,
    as the rollout runs it): the products the rollout does beyond the env + policy-forward limit's."""
    value = actor_critic.behaviour(setup.network, params)[1]
    obs = jnp.zeros((config.num_steps + 1, config.num_envs, *setup.env.spec.observation_shape), jnp.float32)
    return products.flops(products.dots(lambda o: rollout_lib.values_of(value, o), obs)) / 1e6


def critic_ceiling(rows: list[dict], mflop: float, peak: float) -> dict:
    """The most of the env + policy-forward limit a rollout that also runs the critic can reach: the limit's time
    per rollout against that time plus the critic's FLOPs (`mflop`, all seeds) at the peak rate, everything else of
    the critic free."""
    policy = next(r for r in rows if r["case"] == POLICY_CASE)
    policy_us = 1e6 * policy["env_steps"] / policy["steps_per_s"]
    at_peak_us = mflop * 1e3 / peak
    return {
        "critic_mflop": mflop,
        "peak_gflops": peak,
        "critic_at_peak_us": at_peak_us,
        "policy_limit_us": policy_us,
        "ceiling_of_policy_forward_limit": policy_us / (policy_us + at_peak_us),
    }


def rollout_section(num_envs: int, iterations: int, repeats: int, key, seeds: int = 1, peak=None) -> list[dict]:
    """PPO's rollout at PureJaxRL's config with `num_envs` envs against its limits; with `seeds` > 1 every case runs
    vmapped over that many seeds in one program (env steps/s counts all seeds'). With `peak` (a callable giving
    the peak GFLOP/s), the rollout's row also carries `critic_ceiling`."""
    config = ppo.Config(**{**PUREJAXRL, "num_envs": num_envs, "total_timesteps": num_envs * 128 * iterations})
    setup = ppo.setup(config)
    state = ppo.init(setup, config, key)
    length = iterations * config.num_steps
    args = (stacked(state.params, seeds), stacked(state.env, seeds), key)

    def jaxrl_rollouts(params, carry, key):
        act, value = actor_critic.behaviour(setup.network, params)

        def one(carry, k):
            carry, traj = rollout_lib.rollout(setup.env, act, value, carry, k, config.num_steps)
            return carry, sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(traj))

        return jax.lax.scan(one, carry, jax.random.split(key, iterations))[1].sum()

    def act_and_value(params):  # the policy and the critic on every observation, as the rollout needs them
        act, value = actor_critic.behaviour(setup.network, params)

        def both(obs, k):
            action, log_prob = act(obs, k)
            return action, log_prob + value(obs)

        return both

    cases = {
        "env only (random actions)": env_loop(setup.env, lambda p: random_act(setup.env.spec), length),
        POLICY_CASE: env_loop(setup.env, lambda p: actor_critic.behaviour(setup.network, p)[0], length),
        ACTOR_CRITIC_CASE: env_loop(setup.env, act_and_value, length),
        ROLLOUT_CASE: jaxrl_rollouts,
    }
    rows = []
    timings = timed_alternating({name: seeds_of(fn, seeds) for name, fn in cases.items()}, *args, rounds=2 * repeats)
    for name, r in timings.items():
        steps_per_s = length * num_envs * seeds / r["run_s"]
        rows.append(
            {
                "section": "a",
                "case": name,
                "num_envs": num_envs,
                "seeds": seeds,
                "env_steps": config.num_steps * num_envs * seeds,  # one rollout's
                "steps_per_s": steps_per_s,
                **r,
            }
        )
    limit = {r["case"]: r["steps_per_s"] for r in rows}
    policy_limit, actor_critic_limit = limit[POLICY_CASE], limit[ACTOR_CRITIC_CASE]
    for r in rows:
        r["of_policy_forward_limit"] = r["steps_per_s"] / policy_limit
        r["of_actor_critic_limit"] = r["steps_per_s"] / actor_critic_limit
    if peak is not None:
        rollout = next(r for r in rows if r["case"] == ROLLOUT_CASE)
        rollout.update(critic_ceiling(rows, seeds * critic_mflop(setup, state.params, config), peak()))
    return rows


# ------------------------------------------------------------------------------------------- (b) PPO minibatches


class PlainActorCritic(nn.Module):
    action_dim: int

    @nn.compact
    def __call__(self, x):
        def mlp(x, out, gain):
            for _ in range(2):
                x = nn.tanh(nn.Dense(64, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x))
            return nn.Dense(out, kernel_init=nn.initializers.orthogonal(gain))(x)

        return distrax.Categorical(logits=mlp(x, self.action_dim, 0.01)), mlp(x, 1, 1.0)[..., 0]


def plain_updates(config, batch_size: int, obs_dim: int, action_dim: int):
    """`(params, opt_state, batch, key) -> (params, opt_state)`: PPO's epochs of minibatch steps, plainly."""
    network = PlainActorCritic(action_dim)
    optimizer = optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.adam(config.learning_rate, eps=1e-5))

    def loss(params, mb):
        dist, value = network.apply(params, mb["obs"])
        log_prob = dist.log_prob(mb["actions"])
        clipped_value = mb["values"] + jnp.clip(value - mb["values"], -config.clip_eps, config.clip_eps)
        value_loss = 0.5 * jnp.maximum((value - mb["targets"]) ** 2, (clipped_value - mb["targets"]) ** 2).mean()
        ratio = jnp.exp(log_prob - mb["log_probs"])
        adv = (mb["advantages"] - mb["advantages"].mean()) / (mb["advantages"].std() + 1e-8)
        surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - config.clip_eps, 1 + config.clip_eps) * adv)
        return -surrogate.mean() + config.vf_coef * value_loss - config.ent_coef * dist.entropy().mean()

    def updates(params, opt_state, batch, key):
        def epoch(train, k):
            order = jax.random.permutation(k, batch_size)
            mbs = jax.tree.map(lambda x: x[order].reshape((config.num_minibatches, -1) + x.shape[1:]), batch)

            def step(train, mb):
                params, opt_state = train
                grads = jax.grad(loss)(params, mb)
                u, opt_state = optimizer.update(grads, opt_state, params)
                return (optax.apply_updates(params, u), opt_state), None

            return jax.lax.scan(step, train, mbs)[0], None

        return jax.lax.scan(epoch, (params, opt_state), jax.random.split(key, config.update_epochs))[0]

    return network, optimizer, updates


def ppo_batch(config, setup, key) -> dict:
    """A rollout's worth of PPO's learner inputs [T, N, ...] at `config`'s sizes: random observations, actions,
    advantages and targets, uniform behaviour log-probabilities."""
    spec = setup.env.spec
    k = jax.random.split(key, 4)
    return {
        "obs": jax.random.normal(k[0], (config.num_steps, config.num_envs, *spec.observation_shape)),
        "actions": jax.random.randint(k[1], (config.num_steps, config.num_envs), 0, spec.action_dim),
        "log_probs": jnp.full((config.num_steps, config.num_envs), -np.log(spec.action_dim), jnp.float32),
        "values": jnp.zeros((config.num_steps, config.num_envs)),
        "advantages": jax.random.normal(k[2], (config.num_steps, config.num_envs)),
        "targets": jax.random.normal(k[3], (config.num_steps, config.num_envs)),
    }


def ppo_update_section(iterations: int, repeats: int, key) -> list[dict]:
    config = ppo.Config(**{**PUREJAXRL, "anneal_lr": False})
    setup = ppo.setup(config)
    state = ppo.init(setup, config, key)
    n = config.num_envs * config.num_steps
    spec = setup.env.spec
    batch = ppo_batch(config, setup, key)

    def jaxrl_updates(params, opt_state, batch, key):
        def loss(p, mb):
            return ppo.loss_fn(p, setup, config, mb)

        def one(train, k):
            params, opt_state = train
            params, opt_state, _ = actor_critic.minibatch_updates(config, loss, params, opt_state, batch, k)
            return (params, opt_state), None

        return jax.lax.scan(one, (params, opt_state), jax.random.split(key, iterations))[0]

    network, optimizer, plain = plain_updates(config, n, spec.observation_shape[0], spec.action_dim)
    plain_params = network.init(key, batch["obs"][0])
    flat = jax.tree.map(lambda x: x.reshape((n,) + x.shape[2:]), batch)

    def plain_loop(params, opt_state, batch, key):
        def one(train, k):
            return plain(*train, batch, k), None

        return jax.lax.scan(one, (params, opt_state), jax.random.split(key, iterations))[0]

    steps = iterations * config.updates_per_iteration
    rows = []
    for name, fn, args in (
        (
            "jaxrl minibatch steps (ppo.loss_fn, minibatch_updates)",
            jaxrl_updates,
            (state.params, state.opt_state, batch, key),
        ),
        (
            "plain minibatch steps (PureJaxRL's shape)",
            plain_loop,
            (plain_params, optimizer.init(plain_params), flat, key),
        ),
    ):
        r = timed(fn, *args, repeats=repeats)
        rows.append(
            {
                "section": "b",
                "case": name,
                "us_per_step": 1e6 * r["run_s"] / steps,
                "minibatch": n // config.num_minibatches,
                **r,
            }
        )
    rows[0]["of_plain"] = rows[0]["run_s"] / rows[1]["run_s"]
    return rows


def step_cost_section(iterations: int, repeats: int, key) -> list[dict]:
    """The plain PPO minibatch step alone (one epoch, one minibatch) at batch sizes B. The step at B = 8 does
    almost no arithmetic: its time is the floor that dispatching the step's operations costs at any batch, and
    t(8) / t(128) the share of that floor in a step at PureJaxRL's minibatch of 128."""
    config = dataclasses.replace(ppo.Config(**PUREJAXRL), update_epochs=1, num_minibatches=1)
    rows = []
    for size in (8, 32, 128, 512):
        network, optimizer, plain = plain_updates(config, size, 4, 2)
        draws = jax.random.split(key, 3)
        batch = {
            "obs": jax.random.normal(draws[0], (size, 4)),
            "actions": jax.random.randint(draws[1], (size,), 0, 2),
            "log_probs": jnp.full((size,), -np.log(2.0), jnp.float32),
            "values": jnp.zeros((size,)),
            "advantages": jax.random.normal(draws[2], (size,)),
            "targets": jnp.ones((size,)),
        }
        params = network.init(key, batch["obs"][:1])

        def loop(params, opt_state, batch, key, plain=plain, batch_of_size=batch):
            def one(train, k):
                return plain(*train, batch_of_size, k), None

            return jax.lax.scan(one, (params, opt_state), jax.random.split(key, iterations))[0]

        r = timed(loop, params, optimizer.init(params), batch, key, repeats=repeats)
        rows.append(
            {
                "section": "b2",
                "case": f"plain step, batch {size}",
                "batch": size,
                "us_per_step": 1e6 * r["run_s"] / iterations,
                **r,
            }
        )
    floor = rows[0]["us_per_step"]
    for r in rows:
        r["floor_share"] = floor / r["us_per_step"]
    return rows


# -------------------------------------------------------------------------------------------------- (c) DQN parts


def warm_dqn(key):
    """(config, setup, state) of DQN at PureJaxRL's config after 200 iterations: transitions in the replay,
    learning on."""
    config = dqn.Config(**DQN_CONFIG)
    setup = dqn.setup(config)
    state = dqn.init(setup, config, key)
    return (
        config,
        setup,
        jax.jit(lambda s: jax.lax.fori_loop(0, 200, lambda i, s: dqn.update(setup, config, s)[0], s))(state),
    )


def dqn_section(iterations: int, repeats: int, key) -> list[dict]:
    config, setup, warm = warm_dqn(key)
    network, optimizer = setup.network, dqn.make_optimizer(config)
    act = q_learning.behaviour(network, warm.params, 0.1)
    batch_of = functools.partial(replay.sample, batch_size=config.replay_batch_size)

    def whole(s, key):
        return jax.lax.scan(lambda s, _: (dqn.update(setup, config, s)[0], None), s, None, iterations)[0]

    def env_step(s, key):
        def one(carry, k):
            carry, traj = rollout_lib.rollout(
                setup.env, act, rollout_lib.no_critic(setup.env), carry, k, 1, keep_next_obs=True
            )
            return carry, traj.rewards.sum()

        return jax.lax.scan(one, s.env, jax.random.split(key, iterations))[1].sum()

    _, traj = rollout_lib.rollout(
        setup.env, act, rollout_lib.no_critic(setup.env), warm.env, key, 1, keep_next_obs=True
    )
    items = dqn.transitions(traj)

    def add(s, key):
        return jax.lax.scan(lambda b, _: (replay.add(b, items), None), s.buffer, None, iterations)[0]

    def sample(s, key):
        return jax.lax.scan(
            lambda t, k: (t + batch_of(s.buffer, k)["rewards"].sum(), None), 0.0, jax.random.split(key, iterations)
        )[0]

    def gradient(s, key):
        def one(learner, k):
            return dqn.gradient_step(config, network, optimizer, s.target_params, s.buffer, 0.4, learner, k)

        return jax.lax.scan(one, (s.params, s.opt_state, None), jax.random.split(key, iterations))[0][0]

    def target(s, key):
        def one(t, i):
            moved = optax.incremental_update(s.params, t, config.tau)
            return jax.tree.map(lambda a, b: jnp.where(i % 50 == 0, a, b), moved, t), None

        return jax.lax.scan(one, s.target_params, jnp.arange(iterations))[0]

    parts = {
        "dqn.update (one iteration, learning on)": whole,
        "epsilon-greedy env step (10 envs)": env_step,
        "replay add": add,
        "replay sample (128)": sample,
        "gradient step (128, its replay sample included)": gradient,
        "target update": target,
    }
    rows = [
        {"section": "c", "case": name, "us_per_iteration": 1e6 * r["run_s"] / iterations, **r}
        for name, r in timed_alternating(parts, warm, key, rounds=2 * repeats).items()
    ]
    # the gradient step samples its own batch: the sample's row shows that part, and is not counted twice
    rows[0]["sum_of_parts_us"] = sum(r["us_per_iteration"] for r in rows[1:] if r["case"] != "replay sample (128)")
    return rows


# -------------------------------------------------------------------------------------------------- (d) compiles


def compile_section(key) -> list[dict]:
    ppo_config = ppo.Config(**PUREJAXRL)
    dqn_config = dqn.Config(**DQN_CONFIG)
    rates = jnp.logspace(-4, -2, 12)
    sweep = jax.vmap(
        lambda lr, k: base_train(dataclasses.replace(ppo_config, learning_rate=lr), k)[1]["episode_return"]
    )
    rows = []
    for name, fn, args in (
        ("PPO train", functools.partial(base_train, ppo_config), (key,)),
        ("DQN train", functools.partial(base_train, dqn_config), (key,)),
        ("PPO 12-point learning-rate sweep", sweep, (rates, jax.random.split(key, 12))),
    ):
        start = time.perf_counter()
        lowered = jax.jit(fn).lower(*args)
        trace_s = time.perf_counter() - start
        compiled = lowered.compile()
        rows.append(
            {
                "section": "d",
                "case": name,
                "trace_s": trace_s,
                "xla_s": time.perf_counter() - start - trace_s,
                "ops": ops(compiled),
            }
        )
    return rows


# ---------------------------------------------------------------------------------------------- (e) two cuts


def alternating(name: str, a, b, args_a, args_b, repeats: int, per: int) -> list[dict]:
    """`a` and `b` (A, B, B, A), each the best of its two compiled runs: microseconds per `per`, the ratio b/a and
    each side's first XLA compile (the second finds the first's executable in memory)."""
    results = {"a": [], "b": []}
    for which in "abba":
        fn, args = (a, args_a) if which == "a" else (b, args_b)
        results[which].append(timed(fn, *args, repeats=repeats))
    best = {w: min(rs, key=lambda r: r["run_s"]) for w, rs in results.items()}
    return [
        {
            "section": "e",
            "case": name,
            "us_a": 1e6 * best["a"]["run_s"] / per,
            "us_b": 1e6 * best["b"]["run_s"] / per,
            "ratio": best["b"]["run_s"] / best["a"]["run_s"],
            "xla_s_a": results["a"][0]["xla_s"],
            "xla_s_b": results["b"][0]["xla_s"],
        }
    ]


def per_leaf_against_flat(name: str, loop, params, tx, key, repeats: int, per: int) -> list[dict]:
    """`loop(params, opt_state, key, tx)` with `tx` (A) against `optax.flatten(tx)` (B), one vector for all leaves."""
    flat = optax.flatten(tx)
    return alternating(
        f"{name}: optimiser per leaf (A) against one flat vector (B)",
        functools.partial(loop, tx=tx),
        functools.partial(loop, tx=flat),
        (params, tx.init(params), key),
        (params, flat.init(params), key),
        repeats,
        per,
    )


def cuts_section(iterations: int, repeats: int, key) -> list[dict]:
    rows = []
    # one shuffle of PPO's minibatch sizes; 32 vmapped shuffles of 52, the shape of a 32-env POPGym deck reset
    for label, n, copies in (("shuffle of 128", 128, 0), ("shuffle of 512", 512, 0), ("32 shuffles of 52", 52, 32)):

        def shuffles(key, permute, n=n, copies=copies):
            one = (
                (lambda k: jax.vmap(permute, in_axes=(0, None))(jax.random.split(k, copies), n))
                if copies
                else (lambda k: permute(k, n))
            )
            return jax.lax.scan(lambda c, k: (c + one(k).sum(), None), 0, jax.random.split(key, iterations))[0]

        rows += alternating(
            f"{label}: jax.random.permutation (A) against shuffle.permutation (B)",
            functools.partial(shuffles, permute=jax.random.permutation),
            functools.partial(shuffles, permute=shuffle.permutation),
            (key,),
            (key,),
            repeats,
            iterations,
        )

    config = ppo.Config(**{**PUREJAXRL, "anneal_lr": False})
    setup = ppo.setup(config)
    state = ppo.init(setup, config, key)
    batch = ppo_batch(config, setup, key)
    per_leaf = optim.clipped_optimizer("adam", config.learning_rate, config.max_grad_norm)

    def ppo_steps(params, opt_state, key, tx):
        def grads(p, mb):
            return jax.grad(lambda p: ppo.loss_fn(p, setup, config, mb)[0])(p), None

        def one(train, k):
            p, s, _ = minibatch.minibatch_epochs(
                grads, tx, *train, batch, k, config.update_epochs, config.num_minibatches
            )
            return (p, s), None

        return jax.lax.scan(one, (params, opt_state), jax.random.split(key, iterations // 10))[0]

    rows += per_leaf_against_flat(
        "PPO minibatch step",
        ppo_steps,
        state.params,
        per_leaf,
        key,
        repeats,
        iterations // 10 * config.updates_per_iteration,
    )
    dqn_config, dqn_setup, warm = warm_dqn(key)
    dqn_tx = dqn.make_optimizer(dqn_config)

    def dqn_steps(params, opt_state, key, tx):
        def one(learner, k):
            step = dqn.gradient_step(
                dqn_config, dqn_setup.network, tx, warm.target_params, warm.buffer, 0.0, learner, k
            )
            return step[0], None

        return jax.lax.scan(one, (params, opt_state, None), jax.random.split(key, iterations))[0]

    rows += per_leaf_against_flat("DQN gradient step", dqn_steps, warm.params, dqn_tx, key, repeats, iterations)
    return rows


# ------------------------------------------------------------------------------------ (f) the products' floor


class PlainQNetwork(nn.Module):
    """PureJaxRL's CartPole Q-network: 120 and 84 ReLU units."""

    action_dim: int

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(120)(x))
        x = nn.relu(nn.Dense(84)(x))
        return nn.Dense(self.action_dim)(x)


class DQNSteps(NamedTuple):
    """DQN at PureJaxRL's config after `warm_dqn`, and the gradient steps measured on it."""

    config: dqn.Config
    setup: object
    warm: object  # the warm TrainState: replay filled, learning on
    jaxrl: Callable  # (learner, key) -> learner: `dqn.gradient_step` on the warm replay and target network
    learner: tuple  # jaxrl's learner state (params, opt_state, None)
    stored: dict  # the warm replay's transitions, flat [transitions, ...]
    adam: optax.GradientTransformation  # plain Adam at the config's learning rate

    def plain(self, network, params):
        """`plain_dqn_step` of `network` (target `params`) on the same transitions, batch and Adam."""
        return plain_dqn_step(network, params, self.stored, self.config.gamma, self.adam, self.config.replay_batch_size)


def dqn_gradient_steps(key) -> DQNSteps:
    """jaxrl's DQN gradient step and what a plain one needs, on the state of `warm_dqn(key)`."""
    config, setup, warm = warm_dqn(key)
    tx = dqn.make_optimizer(config)

    def jaxrl_step(learner, key):
        return dqn.gradient_step(config, setup.network, tx, warm.target_params, warm.buffer, 0.0, learner, key)[0]

    written = int(replay.steps_stored(warm.buffer))  # per env; the replay is [num_envs, capacity / num_envs, ...]
    stored = jax.tree.map(lambda x: x[:, :written].reshape((-1,) + x.shape[2:]), warm.buffer.experience)
    learner = (warm.params, warm.opt_state, None)
    return DQNSteps(config, setup, warm, jaxrl_step, learner, stored, optax.adam(config.learning_rate))


def plain_dqn_step(network, target_params, transitions: dict, gamma: float, optimizer, batch_size: int):
    """`(params, opt_state, key) -> (params, opt_state)`: one DQN gradient step written plainly (PureJaxRL's
    shape): `batch_size` uniform indices into flat `transitions`, the one-step target from the target network, the
    mean squared TD error, plain Adam."""
    size = jax.tree.leaves(transitions)[0].shape[0]

    def loss(params, batch):
        q = jnp.take_along_axis(network.apply(params, batch["obs"]), batch["actions"][:, None], axis=-1)[:, 0]
        next_q = network.apply(target_params, batch["next_obs"]).max(-1)
        target = batch["rewards"] + (1.0 - batch["terminated"]) * gamma * next_q
        return jnp.mean((q - jax.lax.stop_gradient(target)) ** 2)

    def step(params, opt_state, key):
        index = jax.random.randint(key, (batch_size,), 0, size)
        grads = jax.grad(loss)(params, jax.tree.map(lambda x: x[index], transitions))
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    return step


def products_floor(found: list, iterations: int, repeats: int, key) -> float:
    """Microseconds of one call's products: each distinct product timed alone (`products.products_only`), times its
    count, summed."""
    total = 0.0
    for dot in products.distinct(found):
        run = timed(products.products_only([dot._replace(count=1)], iterations), key, repeats=repeats)
        total += 1e6 * run["run_s"] / iterations * dot.count
    return total


def against_products(name: str, step, carry, inputs: tuple, calls: int, steps: int, repeats: int, key):
    """`step(carry, key, *inputs) -> carry` (`steps` optimiser steps a call), `calls` times in a `lax.scan`, against
    the matrix products of one call, each alone (`products_floor`), in the order floor, step, step, floor:
    microseconds per optimiser step, each the best of its runs."""

    def loop(carry, key, *inputs):
        return jax.lax.scan(lambda c, k: (step(c, k, *inputs), None), carry, jax.random.split(key, calls))[0]

    found = products.dots(step, carry, key, *inputs)
    floors, runs = [], []
    for which in ("floor", "step", "step", "floor"):
        if which == "floor":
            floors.append(products_floor(found, 2000, repeats, key) / steps)
        else:
            runs.append(1e6 * timed(loop, carry, key, *inputs, repeats=repeats)["run_s"] / (calls * steps))
    us, floor = min(runs), min(floors)
    flops = products.flops(found) / steps
    return {
        "section": "f",
        "case": name,
        "us_per_step": us,
        "products_us": floor,
        "of_products": us / floor,
        "products": sum(d.count for d in found) / steps,
        "distinct_products": len(products.distinct(found)),
        "mflop": flops / 1e6,
        "gflops_step": flops / us / 1e3,
        "gflops_products": flops / floor / 1e3,
    }


def ppo_update_phase(key):
    """(config, setup, state, batch, phase) of PPO at PureJaxRL's config (lr not annealed): `phase(train, key,
    batch) -> (params, opt_state)` is one iteration's minibatch steps (`actor_critic.minibatch_updates` of
    `ppo.loss_fn`) from `train` = (params, opt_state) on a `ppo_batch`."""
    config = ppo.Config(**{**PUREJAXRL, "anneal_lr": False})
    setup = ppo.setup(config)

    def phase(train, key, batch):
        def loss(params, minibatch):
            return ppo.loss_fn(params, setup, config, minibatch)

        return actor_critic.minibatch_updates(config, loss, *train, batch, key)[:2]

    return config, setup, ppo.init(setup, config, key), ppo_batch(config, setup, key), phase


PEAK_PRODUCT = 512  # a PEAK_PRODUCT-cubed float32 product alone: the core's arithmetic peak for sections (a) and (f)


def peak_gflops(repeats: int, key) -> float:
    """GFLOP/s of a large square float32 product alone (`products.products_only`): the rate the steps' products
    would run at if their shapes cost nothing."""
    n = PEAK_PRODUCT
    dot = products.Dot((n, n), (n, n), jnp.float32, jnp.float32, (((1,), (0,)), ((), ())), None)
    iterations = 50
    run = timed(products.products_only([dot], iterations), key, repeats=repeats)
    return dot.flops * iterations / run["run_s"] / 1e9


def products_section(iterations: int, repeats: int, key, peak=None) -> list[dict]:
    """PPO's minibatch step and DQN's gradient step, jaxrl's and the plain ones, against their products alone, and
    each step's FLOPs at the peak of one large product (`peak()`, default `peak_gflops`)."""
    peak = peak() if peak is not None else peak_gflops(repeats, key)
    rows = steps_against_products(iterations, repeats, key)
    return [dict(row, peak_gflops=peak, at_peak_us=row["mflop"] * 1e3 / peak) for row in rows]


def steps_against_products(iterations: int, repeats: int, key) -> list[dict]:
    """PPO's minibatch step and DQN's gradient step, jaxrl's and the plain ones, against their products alone."""
    config, setup, state, batch, jaxrl_phase = ppo_update_phase(key)
    n, steps = config.num_envs * config.num_steps, config.updates_per_iteration
    spec = setup.env.spec
    network, optimizer, plain_updates_of = plain_updates(config, n, spec.observation_shape[0], spec.action_dim)
    plain_params = network.init(key, batch["obs"][0])
    flat = jax.tree.map(lambda x: x.reshape((n,) + x.shape[2:]), batch)

    def plain_phase(train, key, batch):
        return plain_updates_of(*train, batch, key)

    rows = [
        against_products(
            "jaxrl PPO minibatch step",
            jaxrl_phase,
            (state.params, state.opt_state),
            (batch,),
            iterations,
            steps,
            repeats,
            key,
        ),
        against_products(
            "plain PPO minibatch step",
            plain_phase,
            (plain_params, optimizer.init(plain_params)),
            (flat,),
            iterations,
            steps,
            repeats,
            key,
        ),
    ]

    steps_of = dqn_gradient_steps(key)
    q_network = PlainQNetwork(steps_of.setup.env.spec.action_dim)
    q_params = q_network.init(key, steps_of.warm.env.obs[0])
    plain_step = steps_of.plain(q_network, q_params)
    adam = steps_of.adam
    return rows + [
        against_products(
            "jaxrl DQN gradient step", steps_of.jaxrl, steps_of.learner, (), iterations * steps, 1, repeats, key
        ),
        against_products(
            "plain DQN gradient step",
            lambda train, key: plain_step(*train, key),
            (q_params, adam.init(q_params)),
            (),
            iterations * steps,
            1,
            repeats,
            key,
        ),
    ]


# ------------------------------------------------------------------------------ (g) the bound over vmapped seeds


def seeds_bound_section(seeds: int, iterations: int, repeats: int, key) -> list[dict]:
    """PPO at PureJaxRL's config over `seeds` seeds vmapped in one program: the rollout against its limits (section
    (a)'s cases, vmapped), jaxrl's minibatch step against its products (section (f), vmapped), and the arithmetic
    bound they make: env steps/s if an iteration took only the faster of the env + policy-forward limit and jaxrl's
    rollout, plus its minibatch steps' products."""
    rollouts = [dict(r, section="g") for r in rollout_section(4, iterations, repeats, key, seeds)]
    config, _, state, batch, phase = ppo_update_phase(key)

    def seeds_phase(train, key, batch):
        return jax.vmap(phase)(train, jax.random.split(key, seeds), batch)

    steps = config.updates_per_iteration
    train = stacked((state.params, state.opt_state), seeds)
    name = f"jaxrl PPO minibatch step, {seeds} seeds vmapped"
    step = against_products(name, seeds_phase, train, (stacked(batch, seeds),), iterations, steps, repeats, key)
    fastest = max(r["steps_per_s"] for r in rollouts if r["case"] in (POLICY_CASE, ROLLOUT_CASE))
    env_steps = seeds * config.num_envs * config.num_steps  # per iteration
    rollout_us = 1e6 * env_steps / fastest
    bound_us = rollout_us + steps * step["products_us"]
    step.update(
        section="g",
        seeds=seeds,
        rollout_us=rollout_us,
        bound_us_per_iteration=bound_us,
        bound_steps_per_s=1e6 * env_steps / bound_us,
    )
    return rollouts + [step]


def table(title: str | None, header: str, lines: list[str]) -> list[str]:
    """A markdown table under an optional `## title`, after a blank line."""
    heading = [f"## {title}"] if title else []
    return ["", *heading, header, "|" + "---|" * (header.count("|") - 1), *lines]


def ceiling_sentence(r: dict) -> str:
    """Section (a)'s rollout row's `critic_ceiling` in words."""
    return (
        f"At {r['num_envs']} envs the critic's forward pass over a rollout's observations is {r['critic_mflop']:.2f} "
        f"MFLOP: {r['critic_at_peak_us']:,.0f} us at the peak ({r['peak_gflops']:.1f} GFLOP/s, one "
        f"{PEAK_PRODUCT}-cubed product alone), against {r['policy_limit_us']:,.0f} us a rollout at the env + policy "
        f"limit. A rollout that runs it reaches at most {r['ceiling_of_policy_forward_limit']:.2f} of that limit, "
        "even with the rest of the critic free."
    )


def markdown(rows: list[dict], record: dict) -> str:
    def of(section):
        return [r for r in rows if r["section"] == section]

    out = [
        "# Where one device's time goes (`python -m benchmarks.limits`)",
        "",
        f"jaxrl at {record['commit']}, {record['machine']['processor']}, {record['machine']['cpu_count']} CPUs, "
        f"XLA_FLAGS={record['xla_flags']!r}, "
        f"{record.get('cpu_threads') or 'one per core (the default)'} CPU thread(s) in XLA's pool, "
        f"load before {record['load_before']}, after {record['load_after']}.",
    ]
    if of("a"):
        out += table(
            "(a) Rollout against the env-only, env + policy-forward and env + policy-and-critic-forward limits",
            "| num_envs | case | env steps/s | of the env + policy limit | of the env + policy and critic limit "
            "| ops |",
            [
                f"| {r['num_envs']} | {r['case']} | {r['steps_per_s']:,.0f} | {r['of_policy_forward_limit']:.2f} | "
                f"{r['of_actor_critic_limit']:.2f} | {r['ops']} |"
                for r in of("a")
            ],
        )
        out += [line for r in of("a") if "ceiling_of_policy_forward_limit" in r for line in ("", ceiling_sentence(r))]
    if of("b"):
        out += table(
            "(b) PPO minibatch steps against the plain step",
            "| case | us per minibatch step | ratio to plain | ops |",
            [f"| {r['case']} | {r['us_per_step']:.0f} | {r.get('of_plain', 1.0):.2f} | {r['ops']} |" for r in of("b")],
        )
        out += ["", "Cost of the plain step against its batch size (one epoch, one minibatch):"]
        out += table(
            None,
            "| batch | us per step | ops |",
            [f"| {r['batch']} | {r['us_per_step']:.0f} | {r['ops']} |" for r in of("b2")],
        )[1:]
        at_128 = [r for r in of("b2") if r["batch"] == 128]
        if at_128:
            share = at_128[0]["floor_share"]
            out += ["", f"The step at batch 8 (almost no arithmetic) takes {share:.0%} of the step at batch 128."]
    if of("c"):
        lines = [f"| {r['case']} | {r['us_per_iteration']:.1f} | {r['ops']} |" for r in of("c")]
        lines += [f"| sum of the parts | {of('c')[0]['sum_of_parts_us']:.1f} | |"]
        out += table("(c) One DQN iteration against its parts", "| case | us per iteration | ops |", lines)
    if of("d"):
        out += table(
            "(d) Compile seconds: tracing + lowering and XLA",
            "| program | trace s | XLA s | ops |",
            [f"| {r['case']} | {r['trace_s']:.1f} | {r['xla_s']:.1f} | {r['ops']} |" for r in of("d")],
        )
    if of("e"):
        out += table(
            "(e) Two cuts against what they replace (A, B, B, A; each the best of its runs)",
            "| case | us A | us B | B / A | XLA s A | XLA s B |",
            [
                f"| {r['case']} | {r['us_a']:.1f} | {r['us_b']:.1f} | {r['ratio']:.2f} | {r['xla_s_a']:.1f} | "
                f"{r['xla_s_b']:.1f} |"
                for r in of("e")
            ],
        )
    if of("f"):
        out += table(
            "(f) Steps against their matrix products, each product alone (floor, step, step, floor; each the best "
            "of its runs)",
            "| step | us per step | its products, us | step / products | products per step (distinct) | "
            "MFLOP per step | GFLOP/s in the step | GFLOP/s of the products alone | its FLOPs at the peak, us |",
            [
                f"| {r['case']} | {r['us_per_step']:.1f} | {r['products_us']:.1f} | {r['of_products']:.2f} | "
                f"{r['products']:.0f} ({r['distinct_products']}) | {r['mflop']:.2f} | {r['gflops_step']:.1f} | "
                f"{r['gflops_products']:.1f} | {r['at_peak_us']:.1f} |"
                for r in of("f")
            ],
        )
        out += [
            "",
            f"The peak: one {PEAK_PRODUCT} x {PEAK_PRODUCT} x {PEAK_PRODUCT} float32 product alone ran at "
            f"{of('f')[0]['peak_gflops']:.1f} GFLOP/s; the last column is each step's FLOPs at that rate.",
        ]
    if of("g"):
        rollouts, (step,) = [r for r in of("g") if "of_products" not in r], [r for r in of("g") if "of_products" in r]
        out += table(
            f"(g) PPO over {step['seeds']} seeds vmapped in one program (4 envs each): the rollout's limits, the "
            "minibatch step against its products, and the bound they make",
            "| case | env steps/s, all seeds | of the env + policy limit | ops |",
            [
                f"| {r['case']} | {r['steps_per_s']:,.0f} | {r['of_policy_forward_limit']:.2f} | {r['ops']} |"
                for r in rollouts
            ],
        )
        out += [
            "",
            f"The minibatch step of all {step['seeds']} seeds: {step['us_per_step']:.1f} us, its products alone "
            f"{step['products_us']:.1f} us ({step['of_products']:.2f}x; {step['products']:.0f} products, "
            f"{step['mflop']:.2f} MFLOP). The bound: the faster rollout, {step['rollout_us']:.0f} us per iteration, "
            f"plus {step['products_us']:.1f} us of products per minibatch step is {step['bound_us_per_iteration']:.0f} "
            f"us per iteration, at most {step['bound_steps_per_s']:,.0f} env steps/s.",
        ]
    return "\n".join(out) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=RESULTS)
    parser.add_argument("--sections", default="abcdefg", help="which of the sections a-g to run (default: all)")
    parser.add_argument(
        "--cpu-threads",
        type=int,
        default=None,
        metavar="N",
        help="XLA's CPU thread pool of N threads (default: one a core)",
    )
    args = parser.parse_args(argv)
    if args.cpu_threads is not None:
        use_cpu_threads(args.cpu_threads)  # before any JAX operation
    scale = 0.2 if args.quick else 1.0
    key = jax.random.key(0)
    load_before = os.getloadavg()
    peak = functools.cache(lambda: peak_gflops(args.repeats, key))  # one measurement for sections (a) and (f)
    sections = {
        "a": lambda: (
            rollout_section(4, int(200 * scale), args.repeats, key, peak=peak)
            + rollout_section(2048, max(1, int(10 * scale)), args.repeats, key, peak=peak)
        ),
        "b": lambda: (
            ppo_update_section(int(200 * scale), args.repeats, key)
            + step_cost_section(int(1000 * scale), args.repeats, key)
        ),
        "c": lambda: dqn_section(int(5000 * scale), args.repeats, key),
        "d": lambda: compile_section(key),
        "e": lambda: cuts_section(int(2000 * scale), args.repeats, key),
        "f": lambda: products_section(int(200 * scale), args.repeats, key, peak=peak),
        "g": lambda: seeds_bound_section(8, int(100 * scale), args.repeats, key),
    }
    rows = [row for name in args.sections for row in sections[name]()]
    import subprocess

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    record = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "machine": machine(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "cpu_threads": args.cpu_threads,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "rows": rows,
    }
    write_json(args.out + ".json", record)
    text = markdown(rows, record)
    with open(args.out + ".md", "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
