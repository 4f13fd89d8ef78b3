"""A Dense layer's weight gradient: XLA's dot x^T g against the forms of `jaxrl.networks.weight_gradient`.

    python -m benchmarks.weight_gradient --cpu-threads 1 --out benchmarks/results/NAME

For x [m, k] and g [m, n] (a layer's inputs and its output's gradient over a minibatch of m rows), dL/dW = x^T g is
what reverse mode computes through `flax.linen.Dense`. `jaxrl.networks.weight_gradient` computes it as n products
x^T g[:, j] for a narrow layer ("columns") and as a plain product of a materialised x^T for a wide one
("transposed"). Two more forms of the same sums are there to compare: (g^T x)^T, the order JAX's reverse mode writes
when the operands' free axes come the other way ("swapped"), and a materialised g^T before the plain product g^T x,
then transposed ("g_transposed"); `--cases FORM:MxKxN ...` picks forms and shapes. Per shape: XLA's dot and the
other form, one product and 8 of them vmapped (8 seeds in one program), each called `--calls` times in a `lax.scan`,
the two forms alternated over `--rounds` rounds (A, B, B, A, ...), each form's best round; and whether the two give
the same bits on random inputs. Output: a table, and `--out` as .json and .md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.common import machine, write_record
from benchmarks.purejaxrl import commit
from jaxrl.sweep.devices import use_cpu_threads

NARROW_SHAPES = [
    (m, k, n) for m, k in ((4, 64), (128, 64), (128, 84), (512, 64), (2048, 64)) for n in (1, 2, 4, 6, 8, 16)
]
WIDE_SHAPES = [(128, 4, 64), (128, 64, 64), (512, 64, 64), (2048, 64, 64), (256, 256, 256)]
WIDE_SHAPES += [(128, 64, 84), (128, 120, 84), (128, 84, 120)]  # widths that keep XLA's dot
CASES = [("columns", shape) for shape in NARROW_SHAPES] + [("transposed", shape) for shape in WIDE_SHAPES]
SEEDS = 8


def dot_form(x, g):
    return jax.lax.dot_general(x, g, (((0,), (0,)), ((), ())))


def columns_form(x, g):
    return jnp.stack([jax.lax.dot_general(x, g[:, j], (((0,), (0,)), ((), ()))) for j in range(g.shape[1])], -1)


def transposed_form(x, g):
    return jax.lax.dot_general(jax.lax.optimization_barrier(x.T), g, (((1,), (0,)), ((), ())))


def swapped_form(x, g):
    """(g^T x)^T: the product JAX's reverse mode writes where the operands' free axes come in the other order."""
    return jax.lax.dot_general(g, x, (((0,), (0,)), ((), ()))).T


def g_transposed_form(x, g):
    """g^T materialised, the plain product g^T x, then its transpose."""
    return jax.lax.dot_general(jax.lax.optimization_barrier(g.T), x, (((1,), (0,)), ((), ()))).T


FORMS = {
    "dot": dot_form,
    "columns": columns_form,
    "transposed": transposed_form,
    "swapped": swapped_form,
    "g_transposed": g_transposed_form,
}


def scanned(form, calls: int):
    """`form` called `calls` times in one program, each call's input depending on the last call's whole output (a
    single element would let XLA compute only that element's reduction)."""

    def loop(x, g):
        def body(carry, _):
            return form(x + carry, g).sum() * 1e-9, None

        return jax.lax.scan(body, jnp.zeros((), x.dtype), None, length=calls)[0]

    return jax.jit(loop)


def measure_shape(form: str, m: int, k: int, n: int, seeds: int, calls: int, rounds: int) -> dict:
    keys = jax.random.split(jax.random.key(0))
    lead = (seeds,) if seeds > 1 else ()
    x, g = jax.random.normal(keys[0], lead + (m, k)), jax.random.normal(keys[1], lead + (m, n))
    forms = {name: jax.vmap(FORMS[name]) if seeds > 1 else FORMS[name] for name in ("dot", form)}
    same = bool((np.asarray(jax.jit(forms["dot"])(x, g)) == np.asarray(jax.jit(forms[form])(x, g))).all())
    compiled = {name: scanned(form, calls).lower(x, g).compile() for name, form in forms.items()}
    best = dict.fromkeys(compiled, float("inf"))
    for round_index in range(rounds):
        for name in list(compiled)[:: 1 if round_index % 2 == 0 else -1]:
            start = time.perf_counter()
            jax.block_until_ready(compiled[name](x, g))
            best[name] = min(best[name], time.perf_counter() - start)
    us = {name: 1e6 * seconds / calls for name, seconds in best.items()}
    return {"form": form, "m": m, "k": k, "n": n, "seeds": seeds, "dot_us": us["dot"], "form_us": us[form],
            "speedup": us["dot"] / us[form], "same_bits": same}  # fmt: skip


def run_record(module: str, argv, args, load_before: list[float]) -> dict:
    """What a run of a products benchmark (`module`, parsed `args` with cpu_threads, calls and rounds) records
    beside its rows: the command, the commit, when, the machine, the load before, XLA's threads, calls and rounds."""
    return {
        "command": f"python -m {module} " + " ".join(argv if argv is not None else sys.argv[1:]),
        "commit": commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_before": load_before,
        "cpu_threads": args.cpu_threads or "XLA's default",
        "calls": args.calls,
        "rounds": args.rounds,
    }


def conditions(record: dict) -> str:
    """`run_record`'s conditions as the sentence under a table's title (without its ending)."""
    return (
        f"`{record['command']}`, jaxrl at {record['commit']}, {record['machine']['processor']}, "
        f"{record['machine']['cpu_count']} CPUs, {record['cpu_threads']} CPU thread(s) in XLA's pool, load before "
        f"{record['load_before']}, after {record['machine']['load_average_1_5_15min']}; {record['calls']} calls a "
        f"program, {record['rounds']} rounds alternating"
    )


def markdown(rows: list[dict], record: dict) -> str:
    lines = [
        "# A Dense layer's weight gradient: XLA's dot against n matrix-vector products (columns), a materialised "
        "x^T (transposed), (g^T x)^T (swapped) or a materialised g^T (g_transposed)",
        "",
        f"{conditions(record)}, each form's best.",
        "",
        "| form | rows m | inputs k | outputs n | seeds vmapped | XLA's dot, us | the form, us | speedup | same bits |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['form']} | {r['m']} | {r['k']} | {r['n']} | {r['seeds']} | {r['dot_us']:.2f} | {r['form_us']:.2f} | "
            f"{r['speedup']:.2f}x | {'yes' if r['same_bits'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def is_shape(text: str) -> bool:
    """Whether `text` is MxKxN with M, K and N positive integers."""
    sizes = text.split("x")
    return len(sizes) == 3 and all(s.isdigit() and int(s) > 0 for s in sizes)


def parse_shape(text: str, option: str) -> tuple[int, int, int]:
    """`128x120x84` -> (128, 120, 84); one line naming `option` and what is wrong otherwise."""
    if not is_shape(text):
        raise SystemExit(f"{option} {text!r}: expected MxKxN (rows, inputs, outputs), each a positive integer")
    m, k, n = (int(s) for s in text.split("x"))
    return m, k, n


def parse_case(text: str) -> tuple[str, tuple[int, int, int]]:
    """`swapped:128x120x84` -> ("swapped", (128, 120, 84)); one line naming what is wrong otherwise."""
    form, _, shape = text.partition(":")
    if form not in FORMS or form == "dot" or not is_shape(shape):
        forms = ", ".join(f for f in FORMS if f != "dot")
        raise SystemExit(f"--cases {text!r}: expected FORM:MxKxN with FORM one of {forms} and M, K, N positive")
    return form, parse_shape(shape, "--cases")


def products_parser(description: str, rounds: int) -> argparse.ArgumentParser:
    """The options of a products benchmark: XLA's CPU threads, calls a program, rounds and the output's stem."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--cpu-threads", type=int, default=0, help="XLA's CPU thread pool (0: XLA's default)")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--out", default=None)
    return parser


def main(argv=None) -> None:
    parser = products_parser(__doc__.splitlines()[0], rounds=6)
    parser.add_argument(
        "--cases",
        nargs="+",
        metavar="FORM:MxKxN",
        help=f"forms ({', '.join(f for f in FORMS if f != 'dot')}) at shapes, e.g. swapped:128x120x84 "
        "(default: the narrow and wide forms' shapes)",
    )
    args = parser.parse_args(argv)
    cases = [parse_case(c) for c in args.cases] if args.cases else CASES
    if args.cpu_threads:
        use_cpu_threads(args.cpu_threads)  # before any JAX operation
    load_before = list(os.getloadavg())
    rows = []
    for form, (m, k, n) in cases:
        for seeds in (1, SEEDS):
            rows.append(measure_shape(form, m, k, n, seeds, args.calls, args.rounds))
            r = rows[-1]
            shape = f"m={m:5d} k={k:3d} n={n:3d} seeds={seeds}"
            print(f"{shape}: dot {r['dot_us']:8.2f} us, {form} {r['form_us']:8.2f} us ({r['speedup']:.2f}x), "
                  f"same bits: {r['same_bits']}", flush=True)  # fmt: skip
    record = {**run_record("benchmarks.weight_gradient", argv, args, load_before), "rows": rows}
    text = markdown(rows, record)
    print(text)
    write_record(args.out, record, text)


if __name__ == "__main__":
    main()
