"""DPO (reference: a moving copy, or the behaviour policy) vs GRPO vs PPO at equal env-step budgets: the budgets,
seeds, timing and final-return definitions of `benchmarks.grpo_curves` (its `run_variant` and `plot`).

For each environment and variant: `jit(vmap(make_train(config)))` over `--seeds` seeds (key 0), compile and run
seconds as `benchmarks.common.measure` defines them; final return per seed `jaxrl.run.report.final_return` (the
last 10% of iterations) with its 95% bootstrap interval over seeds (`jaxrl.plot.bootstrap_interval`). PPO runs
the README's configs (its Pendulum override), GRPO and DPO their defaults on every env.

Outputs: a table on stdout, benchmarks/results/dpo_curves.json (compact, as grpo_curves.json), .md (the table)
and .png (mean and 95% CI over seeds).
Usage: `python -m benchmarks.dpo_curves [--fraction 10] [--envs CartPole-v1 ...] [--variants dpo grpo ...]`.
"""

from __future__ import annotations

import argparse
import datetime
import platform
from pathlib import Path

import jax

from benchmarks import grpo_curves
from benchmarks.common import write_json
from jaxrl.algos import dpo

RESULTS = Path(__file__).parent / "results"
VARIANTS = {"ppo": None, "grpo": None, "dpo": {}, "dpo-behaviour": dict(reference="behaviour")}


def make_config(variant: str, env: str, budget: int):
    if VARIANTS[variant] is None:
        return grpo_curves.make_config(variant, env, budget)
    return dpo, dpo.Config(env=env, total_timesteps=budget, **VARIANTS[variant])


HEADER = ("env", "variant", "env steps", "final return (95% CI)", "steps/s", "compile s", "valid")


def table_row(r: dict, budget: int) -> tuple:
    ci = f"{r['final_mean']:.1f} [{r['final_ci'][0]:.1f}, {r['final_ci'][1]:.1f}]"
    steps = f"{budget:,}"
    return (r["env"], r["variant"], steps, ci, f"{r['steps_per_s']:.0f}", f"{r['compile_s']:.1f}",
            f"{r['valid_fraction']:.2f}")  # fmt: skip


def markdown(rows: list[dict], budgets: dict, meta: dict) -> str:
    lines = [
        "# DPO vs GRPO vs PPO at equal env steps",
        "",
        f"{meta['machine']}, jax {meta['jax']}, {meta['date']}; {rows[0]['seeds']} seeds (key 0) per row, one "
        "`jit(vmap(train))` program each. Final return: `jaxrl.run.report.final_return` (last 10% of iterations), "
        "mean and 95% bootstrap interval over seeds. steps/s: env steps executed / run seconds (the CPU was shared "
        "with other jobs: throughput figures are indicative). valid: fraction of GRPO/DPO member steps inside a "
        "member's first episode.",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    lines += ["| " + " | ".join(table_row(r, budgets[r["env"]])) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=list(grpo_curves.BUDGETS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--fraction", type=int, default=1, help="run 1/fraction of grpo_curves' budgets")
    parser.add_argument("--out", default=str(RESULTS / "dpo_curves"))
    args = parser.parse_args()
    budgets = {env: grpo_curves.BUDGETS.get(env, 500_000) // args.fraction for env in args.envs}
    rows = []
    print(" | ".join(HEADER), flush=True)
    for env in args.envs:
        for variant in args.variants:
            r = grpo_curves.run_variant(variant, env, budgets[env], args.seeds, jax.random.key(0), make=make_config)
            rows.append(r)
            print(" | ".join(table_row(r, budgets[env])), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {jax.device_count()} x {jax.devices()[0].device_kind}",
        "jax": jax.__version__,
        "budgets": budgets,
    }
    write_json(out.with_suffix(".json"), {"meta": meta, "rows": rows})
    out.with_suffix(".md").write_text(markdown(rows, budgets, meta))
    grpo_curves.plot(rows, out.with_suffix(".png"))
    print(f"wrote {out.with_suffix('.json')}, .md and .png")


if __name__ == "__main__":
    main()
