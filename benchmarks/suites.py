"""Throughput of jaxrl's suite adapters against each suite's own random-action stepping, in one run.

Per suite (one representative id each), with the same `--num-envs` N and `--num-steps` T (N x T env steps):
  (jaxrl)  `envs.make(id, N)` (the adapter, its auto-reset and final observations, episode statistics, action
           clipping for continuous actions): `jit(lax.scan)` of T steps with uniformly random actions;
  (native) the suite's own vectorised auto-resetting stepping, as its documentation trains with: Navix's `step`
           (lazy auto-reset) vmapped; Craftax's AutoReset environment vmapped; xminigrid's GymAutoResetWrapper
           vmapped; Jumanji's AutoResetWrapper vmapped; Brax's `envs.create(..., batch_size=N)` (EpisodeWrapper,
           VmapWrapper, AutoResetWrapper); Playground's `wrap_for_brax_training` (Vmap, Episode, BraxAutoReset);
  ratio = jaxrl steps/s / native steps/s (1.0: the adapter costs nothing).
Both loops sum the rewards and (scaled by 1e-9) the observations, so that XLA cannot drop the observation
computation as dead code (a policy reads them).
Compile seconds as `benchmarks.common.measure` defines them; run seconds: the best of `--repeats` calls of each,
the two alternated (the machine is shared). A suite whose
extra is not installed is skipped. Usage: `python -m benchmarks.suites [--num-envs 64] [--num-steps 200]
[--only navix craftax]`; results in benchmarks/results/suites.json and .md.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import time
import warnings
from pathlib import Path

import jax

from benchmarks.common import machine, write_json

RESULTS = Path(__file__).resolve().parent / "results"
IDS = {
    "navix": "navix:Navix-Empty-8x8-v0",
    "craftax": "craftax:Craftax-Classic-Symbolic-v1",
    "xminigrid": "xminigrid:MiniGrid-Empty-8x8",
    "jumanji": "jumanji:Snake-v1",
    "brax": "brax:inverted_pendulum",
    "playground": "playground:CartpoleBalance",
}


def random_action(spec, key, num_envs):
    if spec.discrete:
        return jax.random.randint(key, (num_envs,), 0, spec.action_dim)
    return jax.random.uniform(key, (num_envs, spec.action_dim), minval=spec.action_low, maxval=spec.action_high)


def consumed(obs) -> jax.Array:
    """A scalar that depends on every observation leaf, so that XLA computes the observations (a policy would read
    them) instead of eliminating them as dead code."""
    return 1e-9 * sum(leaf.astype("float32").sum() for leaf in jax.tree.leaves(obs))


def jaxrl_stepper(env_id: str, num_envs: int, num_steps: int):
    """key -> summed reward of T random steps of `envs.make(env_id, N)`."""
    from jaxrl import envs

    env = envs.make(env_id, num_envs)

    def run(key):
        obs, state = env.reset(key)

        def step(carry, k):
            state, total = carry
            action_key, env_key = jax.random.split(k)
            obs, state, reward, _, _, _ = env.step(env_key, state, random_action(env.spec, action_key, num_envs))
            return (state, total + reward.sum() + consumed(obs)), None

        (_, total), _ = jax.lax.scan(step, (state, 0.0), jax.random.split(key, num_steps))
        return total

    return run, env.spec


def native_stepper(suite: str, name: str, spec, num_envs: int, num_steps: int):
    """key -> summed reward of T random steps of the suite's own vectorised, auto-resetting environment."""
    reset, step, batched = native_functions(suite, name)
    if not batched:  # one env's functions: vmap them
        reset, step = jax.vmap(reset), jax.vmap(step)

    def run(key):
        state = reset(jax.random.split(key, num_envs))

        def body(carry, k):
            state, total = carry
            action_key, env_key = jax.random.split(k)
            action = random_action(spec, action_key, num_envs)
            state, reward, obs = step(jax.random.split(env_key, num_envs), state, action)
            return (state, total + reward.sum() + consumed(obs)), None

        (_, total), _ = jax.lax.scan(body, (state, 0.0), jax.random.split(key, num_steps))
        return total

    return run


def native_functions(suite: str, name: str):
    """(reset(key) -> state, step(key, state, action) -> (state, reward, obs), batched) with the suite's own auto-reset:
    of one env (batched False), or of the batch (Brax's wrappers vmap themselves)."""
    if suite == "navix":
        import navix

        env = navix.make(name, max_steps=100)

        def step(key, timestep, action):
            timestep = env.step(timestep, action)
            return timestep, timestep.reward, timestep.observation

        return env.reset, step, False
    if suite == "craftax":
        from craftax.craftax_env import make_craftax_env_from_name

        env = make_craftax_env_from_name(name, auto_reset=True)
        params = env.default_params

        def step(key, state, action):
            obs, state, reward, _, _ = env.step(key, state, action, params)
            return state, reward, obs

        return lambda key: env.reset(key, params)[1], step, False
    if suite == "xminigrid":
        import xminigrid
        from xminigrid.wrappers import GymAutoResetWrapper

        env, params = xminigrid.make(name)
        env = GymAutoResetWrapper(env)

        def step(key, timestep, action):
            timestep = env.step(params, timestep, action)
            return timestep, timestep.reward, timestep.observation

        return lambda key: env.reset(params, key), step, False
    if suite == "jumanji":
        import jumanji
        from jumanji.wrappers import AutoResetWrapper

        env = AutoResetWrapper(jumanji.make(name))

        def step(key, state, action):
            state, timestep = env.step(state, action)
            return state, timestep.reward, timestep.observation

        return lambda key: env.reset(key)[0], step, False
    if suite == "brax":
        from brax import envs as brax_envs
        from brax.envs.wrappers import training

        env = training.wrap(brax_envs.get_environment(name), episode_length=1000)  # Vmap, Episode, AutoReset
    else:
        from mujoco_playground import registry, wrapper

        base = registry.load(name, config_overrides={"impl": "jax"})
        env = wrapper.wrap_for_brax_training(base, episode_length=1000, action_repeat=1)
    reset = lambda keys: env.reset(jax.random.key_data(keys))  # noqa: E731  (the wrappers take raw [N, 2] keys)

    def step(key, state, action):
        state = env.step(state, action)
        return state, state.reward, state.obs

    return reset, step, True


def compile_timed(fn, key):
    """(compiled `jax.jit(fn)` for `key`, its compile seconds as `benchmarks.common.measure` counts them)."""
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(key).compile()
    return compiled, time.perf_counter() - start


def interleaved(ours, native, key, repeats: int) -> tuple[float, float]:
    """The best of `repeats` timed calls of each compiled function, alternating them so that a change in the
    machine's load (it is shared) hits both alike."""
    best = [float("inf"), float("inf")]
    for _ in range(max(1, repeats)):
        for i, fn in enumerate((ours, native)):
            start = time.perf_counter()
            jax.block_until_ready(fn(key))
            best[i] = min(best[i], time.perf_counter() - start)
    return best[0], best[1]


def installed(suite: str) -> bool:
    from jaxrl.envs.suites import SUITES

    return importlib.util.find_spec(SUITES[suite].package) is not None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--num-steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=list(IDS), choices=list(IDS))
    parser.add_argument("--out", default=str(RESULTS / "suites"))
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", category=UserWarning)
    rows = []
    for suite in args.only:
        if not installed(suite):
            print(f"{suite}: not installed, skipped")
            continue
        env_id = IDS[suite]
        steps = args.num_envs * args.num_steps
        ours, spec = jaxrl_stepper(env_id, args.num_envs, args.num_steps)
        native = native_stepper(suite, env_id.split(":", 1)[1], spec, args.num_envs, args.num_steps)
        key = jax.random.key(0)
        compiled_ours, compile_ours = compile_timed(ours, key)
        compiled_native, compile_native = compile_timed(native, key)
        run_ours, run_native = interleaved(compiled_ours, compiled_native, key, args.repeats)
        row = {
            "suite": suite,
            "env_id": env_id,
            "num_envs": args.num_envs,
            "num_steps": args.num_steps,
            "jaxrl_compile_s": round(compile_ours, 2),
            "native_compile_s": round(compile_native, 2),
            "jaxrl_steps_per_s": round(steps / run_ours),
            "native_steps_per_s": round(steps / run_native),
            "ratio": round(run_native / run_ours, 3),
        }
        rows.append(row)
        print(row, flush=True)
    record = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "machine": machine(), "rows": rows}
    write_json(f"{args.out}.json", record)
    Path(f"{args.out}.md").write_text(markdown(record))
    print(markdown(record))


def markdown(record) -> str:
    m = record["machine"]
    lines = [
        "# Suite adapters: env steps/s, jaxrl's adapter vs the suite's own random-action stepping",
        "",
        f"{record['date'][:16]} UTC; {m['processor']}, {m['cpu_count']} CPUs, {', '.join(m['devices'])}, jax "
        f"{m['jax']}; load average {', '.join(f'{x:.1f}' for x in m['load_average_1_5_15min'])} (1, 5, 15 min; "
        "other work shared the machine).",
        "",
        "| suite | id | N x T | jaxrl steps/s | native steps/s | ratio | compile s (jaxrl / native) |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for r in record["rows"]:
        lines.append(
            f"| {r['suite']} | `{r['env_id']}` | {r['num_envs']} x {r['num_steps']} | {r['jaxrl_steps_per_s']:,} | "
            f"{r['native_steps_per_s']:,} | {r['ratio']:.2f} | {r['jaxrl_compile_s']} / {r['native_compile_s']} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
