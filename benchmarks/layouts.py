"""A Dense layer's three products in a training step, with its activations stored batch-major or feature-major.

    python -m benchmarks.layouts --cpu-threads 1 --out benchmarks/results/NAME

For x [m, k] (m rows), W [k, n] and g = dL/dy [m, n], a training step computes y = x W, dL/dx = g W^T and
dL/dW = x^T g. With the activations stored feature-major, x^T [k, m], the same sums are y^T = W^T x^T [n, m],
dL/dx^T = W g^T [k, m] and dL/dW = (g^T x)^T (`LAYOUT_PRODUCTS`: the dimension numbers and whether the program
transposes the output, as `benchmarks.products` runs them). Each product alone is a `products.products_only`
program of `--calls` calls, the products alternated over `--rounds` rounds (A, B, ..., then back), each one's best
round; per shape the three products of each layout are summed with the forward counted twice (DQN's online and
target networks).

`--steps` adds DQN's gradient step at PureJaxRL's config (128 transitions, 120 and 84 ReLU units) in three
networks, each `--calls` steps in a `lax.scan`, alternated over `--rounds` rounds: a plain flax Q-network
(`limits.PlainQNetwork`, batch-major), the same network with its activations stored feature-major [units, rows]
from the input to the Q-values (`FeatureMajorQNetwork`, the same parameters), and jaxrl's own gradient step
(`dqn.gradient_step`). Output: a table, and `--out` as .json and .md.
"""

from __future__ import annotations

import os

import flax.linen as nn
import jax
import jax.numpy as jnp

from benchmarks import limits, products
from benchmarks.common import write_record
from benchmarks.weight_gradient import conditions, parse_shape, products_parser, run_record
from jaxrl.sweep.devices import use_cpu_threads

SHAPES = [(10, 120, 84), (32, 120, 84), (64, 120, 84), (128, 120, 84), (256, 120, 84), (512, 120, 84)]
SHAPES += [(2048, 120, 84), (128, 4, 120), (128, 84, 2), (128, 64, 64)]
PLAIN = (((1,), (0,)), ((), ()))
ROWS_OF_BOTH = (((0,), (0,)), ((), ()))  # contracts the first axis of each operand
COLUMNS_OF_BOTH = (((1,), (1,)), ((), ()))  # the last axis of each


# {product: (its operands from x [m, k], W [k, n], g [m, n]; dimension numbers; whether the program transposes the
# output)}: each layout's forward, input gradient and weight gradient, as XLA runs them
LAYOUT_PRODUCTS = {
    "batch-major forward": (lambda x, w, g: (x, w), PLAIN, False),  # x W [m, n]
    "batch-major input gradient": (lambda x, w, g: (g, w), COLUMNS_OF_BOTH, False),  # g W^T [m, k]
    "batch-major weight gradient": (lambda x, w, g: (g, x), ROWS_OF_BOTH, True),  # (g^T x)^T, as reverse mode
    "feature-major forward": (lambda x, w, g: (w, x.T), ROWS_OF_BOTH, False),  # W^T x^T [n, m], W as stored
    "feature-major input gradient": (lambda x, w, g: (w, g.T), PLAIN, False),  # W g^T [k, m]
    "feature-major weight gradient": (lambda x, w, g: (g.T, x.T), COLUMNS_OF_BOTH, True),  # (g^T x)^T [k, n]
}
LAYOUTS = ("batch-major", "feature-major")


def layer_operands(m: int, k: int, n: int, key=None):
    """x [m, k], W [k, n] and g [m, n]: normal draws from `key`, or their shapes where `key` is None."""
    shapes = ((m, k), (k, n), (m, n))
    if key is None:
        return tuple(jax.ShapeDtypeStruct(shape, jnp.float32) for shape in shapes)
    return tuple(jax.random.normal(k_, shape) for k_, shape in zip(jax.random.split(key, 3), shapes, strict=True))


def layout_product(name: str, x, w, g):
    """`LAYOUT_PRODUCTS[name]` of a layer's x, W and g, transposed where the program transposes it."""
    operands, numbers, transposed = LAYOUT_PRODUCTS[name]
    out = jax.lax.dot_general(*operands(x, w, g), numbers)
    return out.T if transposed else out


def forms(m: int, k: int, n: int) -> dict[str, products.Dot]:
    """{product: its `products.Dot`} for a layer of `k` inputs and `n` outputs over `m` rows (`LAYOUT_PRODUCTS`)."""
    found = {}
    for name, (operands, numbers, transposed) in LAYOUT_PRODUCTS.items():
        lhs, rhs = jax.eval_shape(operands, *layer_operands(m, k, n))
        found[name] = products.Dot(lhs.shape, rhs.shape, lhs.dtype, rhs.dtype, numbers, None, 1, transposed)
    return found


def measure_products(m: int, k: int, n: int, calls: int, rounds: int) -> dict:
    """Microseconds of each of `LAYOUT_PRODUCTS` alone at m rows, k inputs and n outputs (alternated, best round),
    and each layout's step: the forward twice, the input and the weight gradient."""
    found = forms(m, k, n)
    programs = {name: products.products_only([dot], calls) for name, dot in found.items()}
    timings = limits.timed_alternating(programs, jax.random.key(0), rounds=rounds)
    us = {name: 1e6 * timing["run_s"] / calls for name, timing in timings.items()}
    step = {
        layout: 2 * us[f"{layout} forward"] + us[f"{layout} input gradient"] + us[f"{layout} weight gradient"]
        for layout in LAYOUTS
    }
    return {"m": m, "k": k, "n": n, "us": us, "step_us": step}


class FeatureMajorQNetwork(nn.Module):
    """`limits.PlainQNetwork`'s layers and parameters (`Dense_i/kernel` [k, n], `Dense_i/bias` [n]) over the
    observations' rows transposed: h^T [units, rows] from the input to the Q-values, transposed back at the end."""

    action_dim: int

    @nn.compact
    def __call__(self, obs):
        h = obs.reshape(-1, obs.shape[-1]).T
        sizes = (120, 84, self.action_dim)
        for i, n in enumerate(sizes):
            kernel = self.param(f"Dense_{i}_kernel", nn.initializers.lecun_normal(), (h.shape[0], n))
            bias = self.param(f"Dense_{i}_bias", nn.initializers.zeros, (n,))
            h = jax.lax.dot_general(kernel, h, ROWS_OF_BOTH) + bias[:, None]
            h = nn.relu(h) if i < len(sizes) - 1 else h
        return h.T.reshape(obs.shape[:-1] + (self.action_dim,))


def as_feature_major(params: dict) -> dict:
    """`limits.PlainQNetwork`'s parameters under `FeatureMajorQNetwork`'s names."""
    layers = params["params"]
    return {"params": {f"{name}_{leaf}": v for name, layer in layers.items() for leaf, v in layer.items()}}


def measure_steps(calls: int, rounds: int) -> dict[str, float]:
    """Microseconds per DQN gradient step at PureJaxRL's config: the plain batch-major and feature-major networks
    and jaxrl's step, alternated (module docstring)."""
    key = jax.random.key(0)
    steps_of = limits.dqn_gradient_steps(key)
    action_dim = steps_of.setup.env.spec.action_dim
    batch_major = limits.PlainQNetwork(action_dim)
    params = batch_major.init(key, steps_of.warm.env.obs[:1])
    networks = {
        "plain, batch-major": (batch_major, params),
        "plain, feature-major": (FeatureMajorQNetwork(action_dim), as_feature_major(params)),
    }
    steps, carries = {}, {}
    for name, (network, p) in networks.items():
        plain = steps_of.plain(network, p)
        steps[name] = lambda c, k, plain=plain: plain(*c, k)
        carries[name] = (p, steps_of.adam.init(p))
    steps["jaxrl"], carries["jaxrl"] = steps_of.jaxrl, steps_of.learner

    def scanned(name):  # one program's own carry out of all of them: every program takes the same arguments
        step = steps[name]
        return lambda carries, key: jax.lax.scan(
            lambda c, k: (step(c, k), None), carries[name], jax.random.split(key, calls)
        )[0]

    timings = limits.timed_alternating({name: scanned(name) for name in steps}, carries, key, rounds=rounds)
    return {name: 1e6 * timing["run_s"] / calls for name, timing in timings.items()}


def markdown(rows: list[dict], steps: dict | None, record: dict) -> str:
    lines = [
        "# A Dense layer's products in a training step, activations batch-major against feature-major",
        "",
        f"{conditions(record)}, each program's best; microseconds per product.",
        "",
        "| rows m | inputs k | outputs n | forward, batch / feature | input gradient | weight gradient | "
        "step (2 forward), batch / feature | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        us, step = r["us"], r["step_us"]
        cells = [
            f"{us[f'batch-major {p}']:.2f} / {us[f'feature-major {p}']:.2f}"
            for p in ("forward", "input gradient", "weight gradient")
        ]
        ratio = step["feature-major"] / step["batch-major"]
        lines.append(
            f"| {r['m']} | {r['k']} | {r['n']} | {' | '.join(cells)} | "
            f"{step['batch-major']:.2f} / {step['feature-major']:.2f} | {ratio:.2f}x |"
        )
    if steps:
        lines += ["", "DQN's gradient step at PureJaxRL's config, us per step (best round):", ""]
        lines += ["| step | us |", "|---|---|"] + [f"| {name} | {us:.1f} |" for name, us in steps.items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = products_parser(__doc__.splitlines()[0], rounds=4)
    parser.add_argument("--shapes", nargs="+", metavar="MxKxN", help="rows x inputs x outputs (default: SHAPES)")
    parser.add_argument("--steps", action="store_true", help="also DQN's gradient step in both layouts and jaxrl's")
    args = parser.parse_args(argv)
    shapes = [parse_shape(s, "--shapes") for s in args.shapes] if args.shapes else SHAPES
    if args.cpu_threads:
        use_cpu_threads(args.cpu_threads)  # before any JAX operation
    load_before = list(os.getloadavg())
    rows = []
    for m, k, n in shapes:
        rows.append(measure_products(m, k, n, args.calls, args.rounds))
        step = rows[-1]["step_us"]
        print(f"m={m:5d} k={k:3d} n={n:3d}: batch-major {step['batch-major']:8.2f} us, "
              f"feature-major {step['feature-major']:8.2f} us", flush=True)  # fmt: skip
    steps = measure_steps(args.calls, args.rounds) if args.steps else None
    record = {**run_record("benchmarks.layouts", argv, args, load_before), "rows": rows, "steps_us": steps}
    text = markdown(rows, steps, record)
    print(text)
    write_record(args.out, record, text)


if __name__ == "__main__":
    main()
