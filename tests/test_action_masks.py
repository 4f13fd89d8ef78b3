"""Tests for action masks (`EnvSpec.action_mask`): the heads' masked logits and action values against NumPy, the
policies of PPO, DQN and PQN (behaviour and evaluation; recurrent PPO and PQN, IMPALA's Q-critic actor) never
choosing a masked action, the mask kept raw by observation normalisation, and Jumanji's mask being the suite's own.

`test:MaskedChoice-v0` is a toy env registered here: 4 actions, observation [2 noise features, the 4-entry mask];
every step draws a fresh mask (action 0 valid half of the time, at least one of 1-3 always valid) and pays 1 for
action 0 whether it is valid or not, so a policy that ignored the mask would learn to pick action 0 when it is
masked; episodes are 10 steps (truncated).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import envs
from jaxrl.algos import base, dqn, impala, ppo, pqn
from jaxrl.algos.families import q_learning
from jaxrl.envs.suites.base import AutoResetVecEnv, discrete_spec
from jaxrl.networks import ActorCritic, QNetwork, epsilon_greedy
from jaxrl.networks.heads import MASKED
from jaxrl.rollout import RecurrentAct, no_critic, reset, rollout

ENV_ID = "test:MaskedChoice-v0"
NUM_ACTIONS, EPISODE = 4, 10


def choice_mask(key: jax.Array) -> jax.Array:
    """[4] bool: action 0 valid with probability 1/2, each of 1-3 with 1/2, and one of 1-3 always."""
    bits_key, sure_key = jax.random.split(key)
    bits = jax.random.bernoulli(bits_key, 0.5, (NUM_ACTIONS,))
    return bits | (jnp.arange(NUM_ACTIONS) == jax.random.randint(sure_key, (), 1, NUM_ACTIONS))


def choice_observation(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    noise_key, mask_key = jax.random.split(key)
    mask = choice_mask(mask_key)
    obs = jnp.concatenate([jax.random.normal(noise_key, (2,)), mask.astype(jnp.float32)])
    return obs, mask


def choice_reset(key):
    obs, _ = choice_observation(key)
    return obs, jnp.zeros((), jnp.int32)


def choice_step(key, t, action):
    obs, _ = choice_observation(key)
    t = t + 1
    return obs, t, (action == 0).astype(jnp.float32), jnp.zeros((), bool), t >= EPISODE


def make_choice(num_envs: int) -> AutoResetVecEnv:
    spec = discrete_spec(ENV_ID, choice_reset, NUM_ACTIONS, action_mask=True)
    return AutoResetVecEnv(choice_reset, choice_step, num_envs, spec, EPISODE)


envs.register(ENV_ID, make_choice, vectorised=True)


def masks_of(obs) -> np.ndarray:
    """The valid actions of observations: their last 4 entries, all valid where none is."""
    valid = np.asarray(obs)[..., -NUM_ACTIONS:] > 0.5
    return valid | ~valid.any(-1, keepdims=True)


def assert_valid(obs, actions):
    """Every action is valid in the observation it was chosen from."""
    taken = np.take_along_axis(masks_of(obs), np.asarray(actions)[..., None], axis=-1)[..., 0]
    assert taken.all(), f"{(~taken).sum()} of {taken.size} actions were masked"


def masked_obs(masks: np.ndarray) -> jax.Array:
    """Observations [B, 6] with noise features and the given masks [B, 4]."""
    noise = np.random.default_rng(0).normal(size=(masks.shape[0], 2))
    return jnp.asarray(np.concatenate([noise, masks], axis=1), jnp.float32)


MASKS = np.array([[1, 1, 1, 1], [0, 1, 0, 1], [1, 0, 0, 0], [0, 0, 1, 1], [0, 0, 0, 0]], np.float32)


# ---------------------------------------------------------------------------------------------------------------
# heads against NumPy
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_masked_categorical_matches_numpy():
    """log-probs, probabilities and entropy of ActorCritic's masked categorical equal the softmax over the valid
    logits alone; a row with no valid action (the last) counts all as valid."""
    obs = masked_obs(MASKS)
    network = ActorCritic(NUM_ACTIONS, True, action_mask=True)
    params = network.init(jax.random.key(0), obs)
    params = jax.tree.map(lambda p: p * 50.0, params)  # logits far from uniform
    dist = network.apply(params, obs, method="policy")
    logits = np.asarray(network.apply(params, obs, method=lambda m, o: m.actor(o)), np.float64)
    valid = masks_of(obs)
    shifted = np.where(valid, logits - np.where(valid, logits, -np.inf).max(1, keepdims=True), -np.inf)
    log_p = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    p = np.exp(log_p)
    np.testing.assert_allclose(np.asarray(dist.probs), p, atol=1e-6)
    for a in range(NUM_ACTIONS):
        rows = valid[:, a]
        got = np.asarray(dist.log_prob(jnp.full(len(MASKS), a)))
        np.testing.assert_allclose(got[rows], log_p[rows, a], rtol=1e-5, atol=1e-5)
    entropy = -np.where(valid, p * np.where(valid, log_p, 0.0), 0.0).sum(1)
    np.testing.assert_allclose(np.asarray(dist.entropy()), entropy, rtol=1e-5, atol=1e-6)
    assert np.isfinite(np.asarray(dist.kl_divergence(dist))).all()
    assert valid[np.arange(len(MASKS)), np.asarray(dist.mode())].all()
    samples = dist.sample(seed=jax.random.key(1), sample_shape=(500,))
    assert_valid(jnp.broadcast_to(obs, (500, *obs.shape)), samples)


@pytest.mark.slow
def test_masked_q_values_greedy_max_and_epsilon_greedy_match_numpy():
    """QNetwork's masked values: argmax and max over the valid actions only (the greedy choice and PQN's
    bootstrap max); epsilon-greedy probabilities epsilon / #valid on the valid actions + (1 - epsilon) greedy."""
    obs = masked_obs(MASKS)
    for dueling in (False, True):
        network = QNetwork(NUM_ACTIONS, dueling=dueling, action_mask=True)
        params = network.init(jax.random.key(2), obs)
        q = np.asarray(network.apply(params, obs))
        raw = np.asarray(QNetwork(NUM_ACTIONS, dueling=dueling).apply(params, obs))
        valid = masks_of(obs)
        np.testing.assert_array_equal(q, np.where(valid, raw, MASKED))
        greedy = np.where(valid, raw, -np.inf).argmax(1)
        np.testing.assert_array_equal(np.asarray(jnp.argmax(q, -1)), greedy)
        np.testing.assert_allclose(np.asarray(pqn.greedy_value(jnp.asarray(q), 0.1)), raw[np.arange(5), greedy])
        epsilon = 0.3
        expected = epsilon * valid / valid.sum(1, keepdims=True) + (1 - epsilon) * np.eye(NUM_ACTIONS)[greedy]
        np.testing.assert_allclose(np.asarray(epsilon_greedy(jnp.asarray(q), epsilon).probs), expected, atol=1e-7)


def test_unmasked_epsilon_greedy_is_uniform_over_all_actions():
    q = jnp.array([[0.0, 2.0, 1.0]])
    np.testing.assert_allclose(np.asarray(epsilon_greedy(q, 0.3).probs), [[0.1, 0.1 + 0.7, 0.1]], rtol=1e-6)


@pytest.mark.slow
def test_observation_normalisation_keeps_the_mask_raw():
    env = envs.make(ENV_ID, 8, normalize_observations=True)
    raw_env = envs.make(ENV_ID, 8)
    obs, state = env.reset(jax.random.key(3))
    raw_obs, _ = raw_env.reset(jax.random.key(3))
    np.testing.assert_array_equal(np.asarray(obs)[:, -NUM_ACTIONS:], np.asarray(raw_obs)[:, -NUM_ACTIONS:])
    assert not np.allclose(np.asarray(obs)[:, :2], np.asarray(raw_obs)[:, :2])  # the features are normalised
    normalize = envs.observation_normalizer(state)  # what evaluation applies
    tail = np.asarray(raw_obs)[:, -NUM_ACTIONS:]
    np.testing.assert_array_equal(np.asarray(normalize(raw_obs))[:, -NUM_ACTIONS:], tail)


def test_spec_refuses_a_mask_it_cannot_hold():
    with pytest.raises(ValueError, match="action_mask=True needs discrete actions and a flat observation"):
        envs.EnvSpec("x", (3, 3, 2), True, 4, action_mask=True)


# ---------------------------------------------------------------------------------------------------------------
# the algorithms: behaviour and evaluation policies on the masked toy env
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ppo_never_picks_a_masked_action():
    """PPO (normalised observations) trained 10 iterations on MaskedChoice, where masked action 0 still pays:
    1024 behaviour steps after training and the evaluation policy (mode and sample) on them pick only valid
    actions, and the policy did learn to take action 0 where it is valid."""
    config = ppo.Config(env=ENV_ID, total_timesteps=16 * 64 * 10, normalize_observations=True)
    state, _ = jax.jit(ppo.make_train(config))(jax.random.key(0))
    setup = ppo.setup(config)
    traj = jax.jit(lambda s: setup.collect(config, s, jax.random.key(1)).traj)(state)
    assert_valid(traj.obs, traj.actions)
    obs = jnp.asarray(traj.obs).reshape(-1, traj.obs.shape[-1])
    for deterministic in (True, False):
        act, normalize = ppo.evaluation_policy(setup, config, state, deterministic)
        # `traj.obs` are the normalised observations the policy saw; the normaliser leaves their mask raw
        assert_valid(obs, jax.jit(act)(normalize(obs), jax.random.key(2)))
    zero_valid = np.asarray(traj.obs)[..., -NUM_ACTIONS] > 0.5
    assert (np.asarray(traj.actions)[zero_valid] == 0).mean() > 0.5


@pytest.mark.slow
@pytest.mark.parametrize("algo", [dqn, pytest.param(pqn, marks=pytest.mark.extended)], ids=["dqn", "pqn"])
def test_q_learning_never_picks_a_masked_action(algo):
    """DQN and PQN trained briefly on MaskedChoice: epsilon-greedy rollouts at epsilon 1, 0.5 and 0 (uniform
    exploration among the valid actions only, greedy in the masked values) and the evaluation policy (greedy and
    epsilon_end-greedy) pick only valid actions, 4 x 256 steps each."""
    if algo is dqn:
        config = dqn.Config(env=ENV_ID, num_envs=8, total_timesteps=4_000, learning_starts=1_000)
    else:
        config = pqn.Config(env=ENV_ID, num_envs=8, num_steps=16, total_timesteps=4_096, num_minibatches=4)
    state, _ = jax.jit(algo.make_train(config))(jax.random.key(0))
    setup = algo.setup(config)
    env, network = setup.env, setup.network

    @jax.jit
    def run(epsilon, key):
        act = q_learning.behaviour(network, state.params, epsilon)
        carry = reset(env, jax.random.key(3))
        return rollout(env, act, no_critic(env), carry, key, 32)[1]

    for epsilon in (1.0, 0.5, 0.0):
        traj = run(epsilon, jax.random.key(4))
        assert_valid(traj.obs, traj.actions)
    obs = jnp.asarray(traj.obs).reshape(-1, traj.obs.shape[-1])
    for deterministic in (True, False):
        act, _ = algo.evaluation_policy(setup, config, state, deterministic)
        assert_valid(obs, jax.jit(act)(obs, jax.random.key(5)))


# ---------------------------------------------------------------------------------------------------------------
# Jumanji: the mask is the suite's own
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.extended  # Snake's step compiles for 30-80 s on this CPU
def test_jumanji_snake_mask_is_the_suites_own_and_ppo_respects_it():
    """Snake-v1 6x6: the spec declares the mask; over 4 envs x 100 steps of an untrained PPO policy the last 4
    observation entries equal Jumanji's own `State.action_mask` of the returned (auto-reset) state and
    `info["action_mask"]`, and every action taken is valid in them."""
    pytest.importorskip("jumanji")
    env = envs.make("jumanji:Snake-v1", 4, num_rows=6, num_cols=6)
    assert env.spec.action_mask and env.spec.action_dim == 4
    network = ActorCritic(4, True, action_mask=True)
    obs0, _ = env.reset(jax.random.key(0))
    params = network.init(jax.random.key(1), obs0)

    @jax.jit
    def run(key):
        obs, state = env.reset(key)

        def step(carry, k):
            obs, state = carry
            action = network.apply(params, obs, method="policy").sample(seed=k)
            obs_next, state, _, _, _, info = env.step(jax.random.fold_in(k, 1), state, action)
            suite_mask = state.inner[0].action_mask  # Jumanji's State of the returned observation
            return (obs_next, state), (obs, action, obs_next, info["action_mask"], suite_mask)

        return jax.lax.scan(step, (obs, state), jax.random.split(key, 100))[1]

    obs, actions, obs_next, info_mask, suite_mask = jax.tree.map(np.asarray, run(jax.random.key(2)))
    np.testing.assert_array_equal(obs_next[..., -4:] > 0.5, suite_mask)
    np.testing.assert_array_equal(info_mask, suite_mask)
    assert not suite_mask.all()  # some actions were masked
    assert_valid(obs, actions)


@pytest.mark.extended  # 45 s: three more networks compiled (the quick tier keeps PPO's and DQN's checks)
@pytest.mark.parametrize(
    "algo, overrides",
    [(ppo, {"core": "gru"}), (pqn, {"core": "gru"}), (impala, {"critic": "q"})],
    ids=["ppo-gru", "pqn-gru", "impala-q"],
)
def test_recurrent_and_q_critic_policies_respect_the_mask(algo, overrides):
    """The other discrete heads (recurrent actor-critic, recurrent Q-network, IMPALA's actor with a Q critic):
    their evaluation policies, sampled (and greedy) from fresh parameters, pick only valid actions on 512
    MaskedChoice observations."""
    config = algo.Config(env=ENV_ID, **overrides)
    state = base.initial_state(config, jax.random.key(0), algo=algo)
    obs = jax.vmap(lambda k: choice_observation(k)[0])(jax.random.split(jax.random.key(1), 512))
    for deterministic in (True, False):
        act, _ = base.evaluation_policy(config, state, deterministic, algo=algo)
        if isinstance(act, RecurrentAct):
            _, actions = jax.jit(act.step)(act.initial(512), obs, jnp.ones(512, bool), jax.random.key(2))
        else:
            actions = jax.jit(act)(obs, jax.random.key(2))
        assert_valid(obs, actions)
