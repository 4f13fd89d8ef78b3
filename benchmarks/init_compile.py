"""What a network's initialisation costs to compile: flax's `module.init` (a key derivation, a Gaussian draw and a
QR per orthogonal kernel) against `jaxrl.networks.init_params` (one draw and one loop of QRs per group of kernels),
for PureJaxRL's CartPole networks, one seed and vmapped seeds, in one process.

    python -m benchmarks.init_compile                   # PPO's and DQN's networks, 1 and 8 seeds, 8 rounds
    python -m benchmarks.init_compile --rounds 16 --out benchmarks/results/NAME

Each round compiles each program both ways, flax's first in even rounds and jaxrl's first in odd ones (ABBA), with
the options jaxrl's runner compiles with, after `jax.clear_caches()`, so that nothing is reused. Compile seconds
are tracing, lowering and XLA together; the ratio is per round, jaxrl's / flax's. `kernels` counts the compiled
program's fusions. The two give other numbers (the same distribution): this measures the compile only.
Output: a table, and `--out` as `.json` and `.md`.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time

import jax
import jax.numpy as jnp

from benchmarks.common import machine, machine_words, span, write_record
from jaxrl.networks import ActorCritic, MLPTorso, QNetwork, init_params

# PureJaxRL's CartPole networks: PPO's 2 x 64 tanh actor-critic, DQN's 120 and 84 ReLU Q-network
NETWORKS = {
    "ppo": lambda: ActorCritic(action_dim=2, discrete=True, torso=MLPTorso((64, 64), "tanh")),
    "dqn": lambda: QNetwork(2, MLPTorso((120, 84), "relu")),
}
WAYS = ("flax", "jaxrl")


def program(network, way: str, seeds: int):
    """(function, key argument): the network's initialisation from a key, vmapped over `seeds` keys if more than
    one."""
    obs = jnp.zeros((1, 4))
    init = (lambda k: network.init(k, obs)) if way == "flax" else (lambda k: init_params(network, k, obs))
    key = jax.random.key(0)
    return (init, key) if seeds == 1 else (jax.vmap(init), jax.random.split(key, seeds))


def measured(network, way: str, seeds: int) -> dict:
    """Compile seconds (trace, lower and XLA) and kernels of one fresh compile."""
    from jaxrl.run.compile import compiler_options

    jax.clear_caches()
    fn, key = program(network, way, seeds)
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(key).compile(compiler_options())
    compile_s = time.perf_counter() - start
    return {"compile_s": compile_s, "kernels": len(re.findall(r" fusion\(", compiled.as_text()))}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--networks", nargs="+", default=list(NETWORKS), choices=list(NETWORKS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    rows = []
    for name in args.networks:
        network = NETWORKS[name]()
        for seeds in args.seeds:
            runs = {way: [] for way in WAYS}
            for round_ in range(args.rounds):
                for way in WAYS[:: 1 if round_ % 2 == 0 else -1]:
                    runs[way].append(measured(network, way, seeds))
            ratio = [b["compile_s"] / a["compile_s"] for a, b in zip(runs["flax"], runs["jaxrl"], strict=True)]
            rows.append({"network": name, "seeds": seeds, "runs": runs, "compile_ratio": ratio})
            print(line(rows[-1]), flush=True)
    record = {"machine": machine(), "args": vars(args), "rows": rows}
    write_record(args.out, record, markdown(record))


def line(row: dict) -> str:
    flax_runs, ours, ratio = row["runs"]["flax"], row["runs"]["jaxrl"], row["compile_ratio"]
    cells = [
        row["network"],
        str(row["seeds"]),
        span([r["compile_s"] for r in flax_runs]),
        span([r["compile_s"] for r in ours]),
        f"{statistics.median(ratio):.2f}x ({span(ratio)})",
        f"{flax_runs[0]['kernels']} / {ours[0]['kernels']}",
    ]
    return "| " + " | ".join(cells) + " |"


def markdown(record: dict) -> str:
    m = record["machine"]
    head = (
        "# A network's initialisation compiled: flax's `module.init` against `networks.init_params`\n\n"
        f"`python -m benchmarks.init_compile` (rounds {record['args']['rounds']}); {machine_words(m)}.\n\n"
        "| network | seeds | compile s, module.init | init_params | ratio, median (range) | kernels |\n"
        "|---|---|---|---|---|---|\n"
    )
    return head + "\n".join(line(r) for r in record["rows"]) + "\n"


if __name__ == "__main__":
    main()
