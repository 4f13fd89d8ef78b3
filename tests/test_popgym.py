"""POPGym's tasks (`jaxrl.envs.popgym`, registered by `jaxrl.envs.memory`): observations, rewards, episode ends
and resets of RepeatPrevious and CountRecall against NumPy references computed from what the agent observed,
their perfect-memory policies scoring 1, the position-only control tasks against gymnax's CartPole and Pendulum,
the registry and a tiny recurrent PPO run."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import envs
from jaxrl.algos import ppo
from jaxrl.envs import popgym
from jaxrl.envs.memory import MEMORY_LENGTHS, POPGYM_IDS

NUM_ENVS = 4


def roll(env_id, num_steps, policy, carry0, **env_kwargs):
    """Steps `env_id` (NUM_ENVS copies) `num_steps` times with `policy(carry, obs, key) -> (carry, action)`; returns
    per step: obs seen before the step, action, reward, terminated, truncated, the successor (final observation)."""
    env = envs.make(env_id, NUM_ENVS, **env_kwargs)

    @jax.jit
    def run(key):
        k_reset, k_steps = jax.random.split(key)
        obs, state = env.reset(k_reset)

        def step(c, k):
            obs, state, carry = c
            k_act, k_env = jax.random.split(k)
            carry, action = policy(carry, obs, k_act)
            new_obs, state, reward, terminated, truncated, info = env.step(k_env, state, action)
            out = (obs, action, reward, terminated, truncated, info["final_observation"])
            return (new_obs, state, carry), out

        return jax.lax.scan(step, (obs, state, carry0), jax.random.split(k_steps, num_steps))[1]

    return [np.asarray(x) for x in run(jax.random.key(0))]


def uniform_actions(n):
    return lambda carry, obs, key: (carry, jax.random.randint(key, (NUM_ENVS,), 0, n))


def episodes(obs, final, terminated, truncated):
    """Per env, the list of its episodes, each the array of its observations (the first, then every successor)."""
    done = terminated | truncated
    out = []
    for e in range(obs.shape[1]):
        eps, current = [], [obs[0, e]]
        for t in range(obs.shape[0]):
            current.append(final[t, e])
            if done[t, e]:
                eps.append(np.stack(current))
                current = [obs[t + 1, e]] if t + 1 < obs.shape[0] else []
        out.append(eps)
    return out


# RepeatPrevious ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_repeat_previous_matches_the_reference_over_two_episodes():
    n, k = 52, 4  # Easy: one deck, the 4th newest card
    steps = 2 * (n - 1) + 5
    rolled = roll("popgym-RepeatPreviousEasy-v0", steps, uniform_actions(4), 0)
    obs, action, reward, terminated, truncated, final = rolled
    assert obs.shape[1:] == (NUM_ENVS, 4) and np.all(obs.sum(-1) == 1), "one-hot suits"
    assert not truncated.any()
    ends = np.flatnonzero(terminated[:, 0])
    np.testing.assert_array_equal(ends, [n - 2, 2 * n - 3])  # an episode is N - 1 = 51 steps
    assert np.all(terminated == terminated[:, :1])
    for e in range(NUM_ENVS):
        t0 = 0
        for seen in episodes(obs, final, terminated, truncated)[e][:2]:
            suits = seen.argmax(-1)
            assert len(suits) == n and np.all(np.bincount(suits, minlength=4) == 13), "one deck dealt"
            for i in range(n - 1):  # reference: step i names the suit of card i + 1 - k, from i = k - 1 on
                want = 0.0 if i + 1 < k else (1.0 if action[t0 + i, e] == suits[i + 1 - k] else -1.0) / (n - k)
                assert reward[t0 + i, e] == pytest.approx(want, abs=1e-7), (e, i)
            t0 += n - 1
    assert not np.array_equal(obs[n - 1 : n + 10, 0], obs[:11, 0]), "the reset shuffled a new deck"


def remember_k_back(k):
    """The perfect-memory policy: a buffer of the k newest suits (oldest first), answering its oldest."""

    def policy(buffer, obs, key):
        buffer = jnp.concatenate([buffer[:, 1:], obs.argmax(-1)[:, None]], axis=1)
        return buffer, buffer[:, 0]

    return policy


@pytest.mark.slow
def test_repeat_previous_perfect_memory_scores_one_and_lagging_by_one_does_not():
    env_id, n, k = "popgym-RepeatPreviousMedium-v0", 104, 32
    buffer = jnp.zeros((NUM_ENVS, k), jnp.int32)
    _, _, reward, terminated, _, _ = roll(env_id, n - 1, remember_k_back(k), buffer)
    assert terminated[-1].all() and not terminated[:-1].any()
    np.testing.assert_allclose(reward.sum(0), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(reward[: k - 1], 0.0)
    _, _, off, _, _, _ = roll(env_id, n - 1, remember_k_back(k + 1), jnp.zeros((NUM_ENVS, k + 1), jnp.int32))
    assert np.all(off.sum(0) < 0.9), "the (k+1)-th newest card is not the answer"


# CountRecall ------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_count_recall_matches_the_reference_over_two_episodes():
    n, types = 52, 2  # Easy: one deck, colours
    steps = 2 * (n - 1) + 5
    obs, action, reward, terminated, truncated, final = roll("popgym-CountRecallEasy-v0", steps, uniform_actions(27), 0)
    assert obs.shape[1:] == (NUM_ENVS, 2 * types)
    assert np.all(obs[..., :types].sum(-1) == 1) and np.all(obs[..., types:].sum(-1) == 1), "two one-hots"
    assert not truncated.any()
    np.testing.assert_array_equal(np.flatnonzero(terminated[:, 0]), [n - 2, 2 * n - 3])
    for e in range(NUM_ENVS):
        t0 = 0
        for seen in episodes(obs, final, terminated, truncated)[e][:2]:
            values, queries = seen[:, :types].argmax(-1), seen[:, types:].argmax(-1)
            assert np.all(np.bincount(values, minlength=types) == 26), "one value deck dealt"
            assert np.all(np.bincount(queries, minlength=types) == 26), "one query deck dealt"
            for i in range(n - 1):  # reference: the count of value cards 0..i of query i's type
                count = np.sum(values[: i + 1] == queries[i])
                want = (1.0 if action[t0 + i, e] == count else -1.0) / (n - 1)
                assert reward[t0 + i, e] == pytest.approx(want, abs=1e-7), (e, i)
            t0 += n - 1


def counting(types):
    """The perfect-memory policy: running counts of the value types, answering the query's."""

    def policy(counts, obs, key):
        counts = counts + obs[:, :types].astype(jnp.int32)
        return counts, jnp.take_along_axis(counts, obs[:, types:].argmax(-1)[:, None], axis=1)[:, 0]

    return policy


@pytest.mark.slow
@pytest.mark.parametrize(
    "env_id, n, types", [("popgym-CountRecallEasy-v0", 52, 2), ("popgym-CountRecallHard-v0", 208, 13)]
)
def test_count_recall_perfect_memory_scores_one(env_id, n, types):
    _, action, reward, terminated, _, _ = roll(env_id, n - 1, counting(types), jnp.zeros((NUM_ENVS, types), jnp.int32))
    assert terminated[-1].all() and not terminated[:-1].any()
    np.testing.assert_allclose(reward.sum(0), 1.0, rtol=1e-5)
    assert action.max() <= n // types and envs.make(env_id).spec.action_dim == n // types + 1


# Position-only control -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_position_only_cartpole_is_cartpole_without_velocities():
    length = 30
    args = (60, uniform_actions(2), 0)
    obs, act, rew, term, trunc, final = roll("popgym-PositionOnlyCartPoleEasy-v0", *args, max_episode_length=length)
    full = roll("CartPole-v1", *args, max_steps_in_episode=length)
    np.testing.assert_array_equal(act, full[1])
    np.testing.assert_allclose(obs, full[0][..., [0, 2]], rtol=1e-6)
    np.testing.assert_allclose(final, full[5][..., [0, 2]], rtol=1e-6)
    np.testing.assert_allclose(rew, full[2] / length, rtol=1e-6)
    np.testing.assert_array_equal(term, full[3])
    np.testing.assert_array_equal(trunc, full[4])
    assert term.any(), "random actions drop the pole"
    limits = [envs.make(f"popgym-PositionOnlyCartPole{lv}-v0").params.max_steps_in_episode for lv in ("Easy", "Hard")]
    assert limits == [200, 600]


@pytest.mark.slow
def test_position_only_pendulum_is_pendulum_without_angular_velocity():
    length = 20
    box = lambda carry, obs, key: (carry, jax.random.uniform(key, (NUM_ENVS, 1), minval=-2.0, maxval=2.0))  # noqa: E731
    rolled = roll("popgym-PositionOnlyPendulumEasy-v0", 45, box, 0, max_episode_length=length)
    obs, act, rew, term, trunc, final = rolled
    full = roll("Pendulum-v1", 45, box, 0, max_steps_in_episode=length)
    np.testing.assert_allclose(obs, full[0][..., :2], rtol=1e-6)
    np.testing.assert_allclose(rew, (full[2] / 8.1368022 + 1.0) / length, rtol=1e-5, atol=1e-7)
    assert np.all(np.abs(rew) <= 1.0 / length)
    assert not term.any()
    np.testing.assert_array_equal(np.flatnonzero(trunc[:, 0]), [length - 1, 2 * length - 1])
    limits = [envs.make(f"popgym-PositionOnlyPendulum{lv}-v0").params.max_steps_in_episode for lv in ("Medium", "Hard")]
    assert limits == [150, 100]


# Registry, docs, training -------------------------------------------------------------------------------------------


def test_every_task_is_registered_and_documented():
    assert set(POPGYM_IDS) == set(popgym.TASKS) and len(POPGYM_IDS) == 12
    page = (Path(__file__).parents[1] / "docs" / "environments.md").read_text()
    for env_id in POPGYM_IDS:
        envs.check_env_id(env_id)
        task = env_id.removeprefix("popgym-").split("Easy")[0].split("Medium")[0].split("Hard")[0]
        assert f"`popgym-{task}<Level>-v0`" in page, env_id
    assert "`MemoryChain-bsuite-L<n>`, n = " + ", ".join(str(n) for n in MEMORY_LENGTHS) in page
    from jaxrl.envs import gymnax as gymnax_adapter

    assert not set(POPGYM_IDS) & set(gymnax_adapter.ids())


@pytest.mark.parametrize(
    "env_id, shape, actions",
    [
        ("popgym-RepeatPreviousHard-v0", (4,), 4),
        ("popgym-CountRecallMedium-v0", (8,), 27),
        ("popgym-CountRecallHard-v0", (26,), 17),
        ("popgym-PositionOnlyCartPoleMedium-v0", (2,), 2),
    ],
)
def test_levels_have_popgyms_sizes(env_id, shape, actions):
    spec = envs.make(env_id).spec
    assert (spec.observation_shape, spec.discrete, spec.action_dim) == (shape, True, actions)


TINY = ppo.Config(
    env="popgym-RepeatPreviousEasy-v0", core="gru", core_size=8, num_envs=4, num_steps=16,
    total_timesteps=4 * 16 * 3, update_epochs=1, num_minibatches=2,
)  # fmt: skip


def test_ids_are_configs_envs():
    for env_id in POPGYM_IDS:
        ppo.validate(ppo.Config(env=env_id, core="gru"))
    with pytest.raises(ValueError, match="Did you mean 'popgym-RepeatPreviousEasy-v0'"):
        ppo.validate(ppo.Config(env="popgym-RepeatPreviousEasy-v1"))


@pytest.mark.extended
def test_tiny_recurrent_ppo_runs_on_repeat_previous():
    config = TINY
    state, metrics = jax.jit(ppo.make_train(config))(jax.random.key(0))
    assert int(state.iteration) == 3
    for name in ("value_loss", "policy_loss", "entropy"):
        assert np.all(np.isfinite(np.asarray(metrics[name]))), name
