"""benchmarks.products: the matrix products a program runs, their FLOPs against XLA's cost analysis, and the
products-only program that the limits benchmark times as a step's floor."""

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from benchmarks import products

DIMENSIONS = [
    ((8, 5), (5, 3), (((1,), (0,)), ((), ()))),  # x @ w
    ((8, 5), (8, 3), (((0,), (0,)), ((), ()))),  # x.T @ g, a weight gradient
    ((8, 5), (3, 5), (((1,), (1,)), ((), ()))),  # g @ w.T, an input gradient
    ((2, 8, 5), (2, 5, 3), (((2,), (1,)), ((0,), (0,)))),  # batched
    ((3, 8, 5), (5, 3), (((2,), (0,)), ((), ()))),  # a leading axis, as a network applied to [T, B, ...]
    ((1, 8, 5), (5, 3), (((2,), (0,)), ((), ()))),  # a leading axis of 1, as DQN's n-step window of 1
]
RUN_AS = {  # the products the compiled programs run: free axes merged
    (3, 8, 5): ((24, 5), (5, 3), (((1,), (0,)), ((), ()))),
    (1, 8, 5): ((8, 5), (5, 3), (((1,), (0,)), ((), ()))),
}


def _compiled_dot_operands(hlo: str) -> tuple:
    """The operand shapes of the one dot in a compiled program's HLO text."""
    shapes = dict(re.findall(r"(%[\w.-]+) = f32\[([\d,]*)\]", hlo))
    (operands,) = re.findall(r" dot\((%[\w.-]+), (%[\w.-]+)\)", hlo)
    return tuple(tuple(int(n) for n in shapes[name].split(",") if n) for name in operands)


@pytest.mark.parametrize("lhs, rhs, dimension_numbers", DIMENSIONS)
def test_flops_of_a_product_match_xla_cost_analysis(lhs, rhs, dimension_numbers):
    """Each product as the compiled program runs it (`products.as_run`), with XLA's FLOPs."""

    def product(a, b):
        return jax.lax.dot_general(a, b, dimension_numbers)

    (found,) = products.dots(product, jnp.ones(lhs), jnp.ones(rhs))
    run_as = RUN_AS.get(lhs, (lhs, rhs, dimension_numbers))
    assert (found.lhs_shape, found.rhs_shape, found.dimension_numbers) == run_as
    compiled = jax.jit(product).lower(jnp.ones(lhs), jnp.ones(rhs)).compile()
    assert _compiled_dot_operands(compiled.as_text()) == run_as[:2]
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    assert found.flops == cost["flops"]


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(2)(nn.relu(nn.Dense(16)(x)))


def test_a_gradient_step_runs_its_forward_and_transposed_products():
    network = MLP()
    params = network.init(jax.random.key(0), jnp.ones((4, 3)))

    def loss(p, x):
        return network.apply(p, x).sum()

    found = products.dots(jax.grad(loss), params, jnp.ones((32, 3)))
    # forward: two layers; backward: both weight gradients and the input gradient of the second layer only
    assert len(found) == 5
    shapes = sorted((d.lhs_shape, d.rhs_shape) for d in found)
    assert ((32, 3), (3, 16)) in shapes and ((32, 16), (16, 2)) in shapes
    forward = 2 * 32 * (3 * 16 + 16 * 2)
    assert products.flops(found) == forward + 2 * 32 * (3 * 16 + 16 * 2) + 2 * 32 * 2 * 16


def test_a_scan_counts_its_length_a_cond_its_larger_branch_a_while_loop_is_refused():
    w = jnp.ones((5, 5))

    def scanned(x):
        return jax.lax.scan(lambda c, _: (c @ w, None), x, None, 7)[0]

    (found,) = products.dots(scanned, jnp.ones((4, 5)))
    assert found.count == 7 and products.flops([found]) == 7 * 2 * 4 * 5 * 5

    def branches(flag, x):
        return jax.lax.cond(flag, lambda x: x @ w @ w, lambda x: x @ w, x)

    assert len(products.dots(branches, True, jnp.ones((4, 5)))) == 2

    def looped(x):
        return jax.lax.fori_loop(0, jnp.int32(3) + jnp.zeros((), jnp.int32), lambda i, c: c @ w, x)

    with pytest.raises(ValueError, match="while_loop"):
        products.dots(looped, jnp.ones((4, 5)))


def computations(hlo: str) -> dict[str, str]:
    """name -> text of each computation of an HLO module's text."""
    found, name = {}, None
    for line in hlo.splitlines():
        head = re.match(r"\s*(?:ENTRY )?%?([\w.\-]+) \(.*\{$", line)
        if head:
            name = head.group(1)
            found[name] = ""
        elif name:
            found[name] += line + "\n"
    return found


def dots_inside_the_loop(hlo: str) -> int:
    """Products in the while loops' bodies and the computations they call (fusions wrapping a product)."""
    bodies = computations(hlo)
    seen, todo, count = set(), re.findall(r"while\(.*body=%([\w.\-]+)", hlo), 0
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        count += bodies[name].count(" dot(")
        todo += re.findall(r"calls=%([\w.\-]+)", bodies[name])
    return count


def test_the_products_only_program_runs_each_product_once_per_iteration():
    w = jnp.ones((6, 5))

    def step(x):
        h = x @ w.T
        return jax.lax.dot_general(h, x, (((0,), (0,)), ((), ())))

    found = products.dots(step, jnp.ones((8, 5)))
    program = products.products_only(found, iterations=3)
    compiled = jax.jit(program).lower(jax.random.key(0)).compile()
    assert len(found) == 2
    hlo = compiled.as_text()
    assert dots_inside_the_loop(hlo) == hlo.count(" dot(") == 2  # none elided, merged or hoisted out of the loop
    assert jnp.isfinite(compiled(jax.random.key(0)))


@pytest.mark.parametrize("seeds", [None, 3])
def test_a_product_whose_output_the_program_transposes_is_timed_with_that_transpose(seeds):
    def weight_gradient(w, x):
        return jax.grad(lambda w: jnp.tanh(x @ w).sum())(w)

    w, x = jnp.ones((4, 120)), jnp.ones((128, 4))
    if seeds:  # vmapped: a batched product whose last two axes the program swaps
        weight_gradient = jax.vmap(weight_gradient)
        w, x = jnp.stack([w] * seeds), jnp.stack([x] * seeds)
    batch = (seeds,) if seeds else ()
    found = products.dots(weight_gradient, w, x)
    flipped = [d for d in found if d.transposed]
    # JAX writes x^T g as (g^T x)^T: a [120, 4] product, then its transpose; the forward product is not transposed
    assert [(d.lhs_shape, d.rhs_shape) for d in flipped] == [((*batch, 128, 120), (*batch, 128, 4))]
    assert all(not d.transposed for d in found if d not in flipped)
    (timed,) = products.dots(products.products_only(flipped, iterations=2), jax.random.key(0))
    assert timed.transposed and (timed.lhs_shape, timed.rhs_shape) == ((*batch, 128, 120), (*batch, 128, 4))


def test_distinct_merges_products_of_one_shape_and_keeps_the_flops():
    w = jnp.ones((5, 5))

    def two_layers_and_a_wide_one(x):
        return (x @ w @ w).sum() + (x @ jnp.ones((5, 7))).sum()

    found = products.dots(two_layers_and_a_wide_one, jnp.ones((4, 5)))
    merged = products.distinct(found)
    assert sorted(d.count for d in merged) == [1, 2]
    assert products.flops(merged) == products.flops(found) == 2 * 4 * 5 * (5 + 5 + 7)


def test_limits_times_a_step_between_two_floors_and_the_floor_sums_each_distinct_product(monkeypatch):
    from benchmarks import limits

    w = jnp.ones((5, 5))

    def step(carry, key, x):  # two products of one shape, one of another
        return carry + (x @ w @ w).sum() + (x @ jnp.ones((5, 7))).sum()

    timed_programs = []
    seconds = {"step": iter([0.9, 0.6]), "floor": iter([0.2, 0.1, 0.3, 0.1])}  # per distinct product, then again

    def fake_timed(fn, *args, repeats):
        which = "floor" if len(args) == 1 else "step"  # a floor program takes the key alone
        timed_programs.append(which)
        return {"run_s": next(seconds[which]), "xla_s": 0.0, "trace_s": 0.0, "ops": 1}

    monkeypatch.setattr(limits, "timed", fake_timed)
    key = jax.random.key(0)
    row = limits.against_products("s", step, jnp.zeros(()), (jnp.ones((4, 5)),), calls=10, steps=2, repeats=1, key=key)
    assert timed_programs == ["floor", "floor", "step", "step", "floor", "floor"]
    # floor per call: (0.2 s x 2 products + 0.1 s x 1) / 2000 iterations, or (0.3 x 2 + 0.1) / 2000; the least
    assert row["products_us"] == pytest.approx(1e6 * 0.5 / 2000 / 2)
    assert row["us_per_step"] == pytest.approx(1e6 * 0.6 / (10 * 2))
    assert row["of_products"] == pytest.approx(row["us_per_step"] / row["products_us"])
    assert (row["products"], row["distinct_products"]) == (1.5, 2)
    assert row["mflop"] == pytest.approx(2 * 4 * 5 * (5 + 5 + 7) / 2 / 1e6)


@pytest.mark.slow  # builds PPO's state and batch (4 s)
def test_the_seeds_bound_adds_the_faster_rollout_to_each_minibatch_steps_products(monkeypatch):
    from benchmarks import limits

    rollouts = [
        {"section": "a", "case": "env only (random actions)", "steps_per_s": 900_000.0},
        {"section": "a", "case": "env + policy forward", "steps_per_s": 400_000.0},
        {"section": "a", "case": limits.ROLLOUT_CASE, "steps_per_s": 500_000.0},  # faster than the limit: it counts
    ]
    seen = {}

    def fake_rollouts(num_envs, iterations, repeats, key, seeds):
        seen["rollout"] = (num_envs, seeds)
        return [dict(r) for r in rollouts]

    def fake_against(name, step, carry, inputs, calls, steps, repeats, key):
        seen["leading"] = {x.shape[0] for x in jax.tree.leaves((carry, inputs))}
        return {"section": "f", "case": name, "products_us": 100.0, "us_per_step": 150.0}

    monkeypatch.setattr(limits, "rollout_section", fake_rollouts)
    monkeypatch.setattr(limits, "against_products", fake_against)
    rows = limits.seeds_bound_section(8, iterations=1, repeats=1, key=jax.random.key(0))
    assert seen == {"rollout": (4, 8), "leading": {8}}  # every state and batch leaf stacked over the 8 seeds
    assert [r["section"] for r in rows] == ["g"] * 4
    bound = rows[-1]
    env_steps = 8 * 4 * 128  # per iteration, all seeds
    assert bound["rollout_us"] == pytest.approx(1e6 * env_steps / 500_000)
    assert bound["bound_us_per_iteration"] == pytest.approx(bound["rollout_us"] + 16 * 100.0)  # 4 epochs x 4
    assert bound["bound_steps_per_s"] == pytest.approx(1e6 * env_steps / bound["bound_us_per_iteration"])


def test_the_peak_is_a_large_products_rate_and_each_step_is_priced_at_it(monkeypatch):
    from benchmarks import limits

    def fake_timed(fn, key, repeats):  # the peak's program: 50 products of 512^3 in 0.1 s
        return {"run_s": 0.1, "xla_s": 0.0, "trace_s": 0.0, "ops": 1}

    steps = [{"section": "f", "case": "a step", "mflop": 6.0}, {"section": "f", "case": "another", "mflop": 10.0}]
    monkeypatch.setattr(limits, "timed", fake_timed)
    monkeypatch.setattr(limits, "steps_against_products", lambda iterations, repeats, key: [dict(r) for r in steps])
    rows = limits.products_section(1, 1, jax.random.key(0))
    peak = 50 * 2 * 512**3 / 0.1 / 1e9
    assert [r["peak_gflops"] for r in rows] == pytest.approx([peak, peak])
    assert [r["at_peak_us"] for r in rows] == pytest.approx([6.0e3 / peak, 10.0e3 / peak])  # MFLOP / GFLOP/s
    for row in rows:
        row.update(us_per_step=1.0, products_us=1.0, of_products=1.0, products=1, distinct_products=1)
        row.update(gflops_step=1.0, gflops_products=1.0)
    record = {"commit": "x", "machine": {"processor": "p", "cpu_count": 2}, "xla_flags": "", "load_before": [0]}
    text = limits.markdown(rows, {**record, "load_after": [0]})
    assert f"product alone ran at {peak:.1f} GFLOP/s" in text
    assert f"| a step | 1.0 | 1.0 | 1.00 | 1 (1) | 6.00 | 1.0 | 1.0 | {6.0e3 / peak:.1f} |" in text


@pytest.mark.parametrize("num_envs", [4, 1024])  # 1024 x 129 rows: the critic runs in chunks (`values_of`)
def test_the_critics_flops_are_its_layers_on_every_observation_of_a_rollout(num_envs):
    from benchmarks import limits
    from benchmarks.throughput import PUREJAXRL
    from jaxrl.algos import ppo

    config = ppo.Config(**{**PUREJAXRL, "num_envs": num_envs, "total_timesteps": num_envs * 128})
    setup = ppo.setup(config)
    params = ppo.init(setup, config, jax.random.key(0)).params
    rows = (config.num_steps + 1) * num_envs
    per_row = 2 * (4 * 64 + 64 * 64 + 64 * 1)  # CartPole's 4 inputs, 2 x 64, one value
    assert limits.critic_mflop(setup, params, config) == pytest.approx(rows * per_row / 1e6)


def test_the_critic_caps_the_rollout_at_the_policy_limits_time_over_that_time_plus_the_critic_at_the_peak():
    from benchmarks import limits

    rows = [
        {"section": "a", "case": "env only (random actions)", "num_envs": 4, "env_steps": 512, "steps_per_s": 2e6},
        {"section": "a", "case": "env + policy forward", "num_envs": 4, "env_steps": 512, "steps_per_s": 1.024e6},
        {"section": "a", "case": limits.ROLLOUT_CASE, "num_envs": 4, "env_steps": 512, "steps_per_s": 8e5},
    ]
    ceiling = limits.critic_ceiling(rows, mflop=100.0, peak=200.0)  # 100 MFLOP at 200 GFLOP/s: 500 us
    assert ceiling["policy_limit_us"] == pytest.approx(500.0)  # 512 env steps at 1.024M a second
    assert ceiling["critic_at_peak_us"] == pytest.approx(500.0)
    assert ceiling["ceiling_of_policy_forward_limit"] == pytest.approx(0.5)
    sentence = limits.ceiling_sentence({**rows[2], **ceiling})
    assert "At 4 envs" in sentence and "100.00 MFLOP: 500 us at the peak (200.0 GFLOP/s" in sentence
    assert sentence.endswith("reaches at most 0.50 of that limit, even with the rest of the critic free.")


def test_limits_alternates_its_cases_round_by_round_and_keeps_each_cases_best_call(monkeypatch):
    from benchmarks import limits

    order = []
    seconds = {"a": iter([0.5, 0.3, 0.4, 0.6]), "b": iter([0.2, 0.9, 0.1, 0.8]), "c": iter([0.7, 0.7, 0.7, 0.5])}
    names = {}

    def fake_call(compiled, *args):
        order.append(names[id(compiled)])
        return next(seconds[names[id(compiled)]])

    def fake_compiled(fn, *args):
        compiled = object()
        names[id(compiled)] = fn.__name__
        return compiled, {"trace_s": 0.0, "xla_s": 0.0, "ops": 1}

    def a(x):
        return x

    def b(x):
        return x

    def c(x):
        return x

    monkeypatch.setattr(limits, "compiled_with_seconds", fake_compiled)
    monkeypatch.setattr(limits, "seconds_of_call", fake_call)
    timings = limits.timed_alternating({"a": a, "b": b, "c": c}, jnp.zeros(()), rounds=4)
    assert order == ["a", "b", "c", "c", "b", "a", "a", "b", "c", "c", "b", "a"]
    assert {name: t["run_s"] for name, t in timings.items()} == {"a": 0.3, "b": 0.1, "c": 0.5}
    assert timings["b"]["run_s_all"] == [0.2, 0.9, 0.1, 0.8]


@pytest.mark.slow  # builds DQN's state and traces one rollout eagerly (3 s)
def test_the_dqn_parts_sum_counts_the_replay_sample_once(monkeypatch):
    from benchmarks import limits
    from jaxrl.algos import dqn

    def unwarmed(key):
        config = dqn.Config(**limits.DQN_CONFIG)
        setup = dqn.setup(config)
        return config, setup, dqn.init(setup, config, key)

    us = {
        "dqn.update (one iteration, learning on)": 300.0,
        "epsilon-greedy env step (10 envs)": 10.0,
        "replay add": 1.0,
        "replay sample (128)": 9.0,
        "gradient step (128, its replay sample included)": 250.0,
        "target update": 0.5,
    }

    def fake_alternating(fns, *args, rounds):
        assert list(fns) == list(us)
        return {name: {"run_s": us[name] * 1e-6 * 100, "trace_s": 0.0, "xla_s": 0.0, "ops": 1} for name in fns}

    monkeypatch.setattr(limits, "warm_dqn", unwarmed)
    monkeypatch.setattr(limits, "timed_alternating", fake_alternating)
    rows = limits.dqn_section(100, 1, jax.random.key(0))
    assert [r["us_per_iteration"] for r in rows] == pytest.approx(list(us.values()))
    assert rows[0]["sum_of_parts_us"] == pytest.approx(10.0 + 1.0 + 250.0 + 0.5)


@pytest.mark.parametrize("form", ["dot", "columns", "transposed", "swapped", "g_transposed"])
def test_every_weight_gradient_form_of_the_benchmark_is_x_transpose_g(form):
    import numpy as np

    from benchmarks import weight_gradient

    x, g = jax.random.normal(jax.random.key(1), (128, 12)), jax.random.normal(jax.random.key(2), (128, 5))
    reference = np.asarray(x, np.float64).T @ np.asarray(g, np.float64)
    out = np.asarray(jax.jit(weight_gradient.FORMS[form])(x, g))
    assert out.shape == (12, 5)
    np.testing.assert_allclose(out, reference, rtol=1e-5, atol=1e-4)


def test_the_weight_gradient_benchmark_reads_its_cases_and_refuses_a_bad_one():
    from benchmarks import weight_gradient

    assert weight_gradient.parse_case("swapped:128x120x84") == ("swapped", (128, 120, 84))
    for bad in ("dot:128x4x4", "nope:128x4x4", "swapped:128x4", "swapped:128x0x4"):
        with pytest.raises(SystemExit, match="FORM:MxKxN"):
            weight_gradient.parse_case(bad)


@pytest.mark.parametrize("name", ["batch-major", "feature-major"])
def test_each_layout_computes_the_layers_forward_input_and_weight_gradient(name):
    import numpy as np

    from benchmarks import layouts

    x, w, g = layouts.layer_operands(16, 7, 5, jax.random.key(3))
    x64, w64, g64 = (np.asarray(a, np.float64) for a in (x, w, g))
    feature_major = name == "feature-major"
    expected = {  # batch-major results, transposed where the feature-major layout stores them [features, rows]
        "forward": (x64 @ w64).T if feature_major else x64 @ w64,
        "input gradient": (g64 @ w64.T).T if feature_major else g64 @ w64.T,
        "weight gradient": x64.T @ g64,
    }
    found = layouts.forms(16, 7, 5)
    for product, reference in expected.items():
        out = np.asarray(layouts.layout_product(f"{name} {product}", x, w, g))
        np.testing.assert_allclose(out, reference, rtol=1e-5, atol=1e-5, err_msg=product)
        assert found[f"{name} {product}"].flops == 2 * 16 * 7 * 5


def test_the_feature_major_q_network_gives_the_plain_networks_q_values():
    import numpy as np

    from benchmarks import layouts, limits

    obs = jax.random.normal(jax.random.key(4), (128, 4))
    plain = limits.PlainQNetwork(2)
    params = plain.init(jax.random.key(5), obs[:1])
    q = layouts.FeatureMajorQNetwork(2).apply(layouts.as_feature_major(params), obs)
    assert q.shape == (128, 2)
    np.testing.assert_allclose(np.asarray(q), np.asarray(plain.apply(params, obs)), rtol=1e-5, atol=1e-5)
    for bad in ("128x120", "128x0x84", "axbxc"):
        with pytest.raises(SystemExit, match="--shapes .*MxKxN"):
            layouts.parse_shape(bad, "--shapes")
