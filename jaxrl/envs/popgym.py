"""POPGym's memory tasks as gymnax 1.x environments in pure JAX.

The definitions are those of POPGym (Morad et al. 2023, "POPGym: Benchmarking Partially Observable Reinforcement
Learning", ICLR): each task's return lies in [-1, 1] (CartPole's in [0, 1]) whatever its length, and its Easy,
Medium and Hard levels are POPGym's. Discrete observations (a card's suit, colour or rank) are one-hot vectors, as
POPGym's baselines feed them to their models. `jaxrl.envs.memory` registers them as `popgym-<Task><Level>-v0`.

- `RepeatPrevious(num_decks, k)`: a shuffled deck of N = 52 * num_decks cards is dealt one card a step; the
  observation is the suit of the newest card (one-hot, 4). The action after the card dealt at step t is rewarded
  +1 / (N - k) if it names the suit of the card dealt at step t + 1 - k (the k-th newest card, k = 1 the newest)
  and -1 / (N - k) if not, from t = k - 1 on (0 before). The episode terminates after N - 1 steps, when the deck has
  one card left. Levels: Easy (1 deck, k = 4), Medium (2, 32), Hard (3, 64).
- `CountRecall(num_decks, num_types)`: two decks of N cards, a value deck and a query deck, each shuffled and dealt
  one card a step; a card's type is its colour (2 types), suit (4) or rank (13), each type N / num_types times. The
  observation is the type of the newest value card and of the newest query card (two one-hots). The action (0 to
  N / num_types) after step t is rewarded +1 / (N - 1) if it is the number of value cards dealt up to step t with
  the type of the query card dealt at step t, -1 / (N - 1) if not. The episode terminates after N - 1 steps.
  Levels: Easy (1 deck, colours), Medium (2, suits), Hard (4, ranks).
- `PositionOnlyCartPole(max_episode_length)`: gymnax's CartPole-v1 with the velocities removed, observing the
  cart's position and the pole's angle; every step is rewarded 1 / max_episode_length, the episode terminates where
  CartPole's does and is truncated after max_episode_length steps. Levels: Easy 200, Medium 400, Hard 600 steps.
- `PositionOnlyPendulum(max_episode_length)`: gymnax's Pendulum-v1 without the angular velocity, observing
  (cos theta, sin theta); a step's reward r in [-16.27, 0] becomes (r / 8.1368 + 1) / max_episode_length, in
  [-1, 1] / max_episode_length, and the episode is truncated after max_episode_length steps. Levels: Easy 200,
  Medium 150, Hard 100 steps.

POPGym reports the end of RepeatPrevious's deck as a truncation; here it is a termination, as in CountRecall: the
deck's end is part of the task and no reward follows it. POPGym's CountRecall actions stop at N / num_types - 1, one
short of the largest count that can occur; here every count is an action.

This module imports gymnax; `jaxrl.envs.memory` imports it on first use.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.envs.gymnax import import_gymnax

import_gymnax()  # gymnax without its render-only imports, before its modules below
from gymnax.environments import environment, spaces  # noqa: E402
from gymnax.environments.classic_control.cartpole import CartPole  # noqa: E402
from gymnax.environments.classic_control.pendulum import Pendulum  # noqa: E402

DECK_SIZE = 52
NUM_SUITS = 4
PENDULUM_HALF_RANGE = 8.1368022  # half of Pendulum's reward range [-16.2736044, 0]


@struct.dataclass
class RepeatPreviousState(environment.EnvState):
    cards: jax.Array  # [N] the suit of each card, in the order they are dealt; card `time` is the newest


@struct.dataclass
class CountRecallState(environment.EnvState):
    values: jax.Array  # [N] the type of each value card, in dealing order
    queries: jax.Array  # [N] the type of each query card, in dealing order
    counts: jax.Array  # [num_types] value cards of each type dealt so far, the newest included


class RepeatPrevious(environment.Environment):
    """Name the suit of the k-th newest card (POPGym's RepeatPrevious; definition in the module docstring)."""

    def __init__(self, num_decks: int = 1, k: int = 4):
        super().__init__()
        self.num_cards, self.k = DECK_SIZE * num_decks, k
        if not 1 <= k < self.num_cards:
            raise ValueError(f"RepeatPrevious: k={k} must be in [1, {self.num_cards}) for {num_decks} deck(s).")

    @property
    def default_params(self) -> environment.EnvParams:
        # The deck's end terminates the episode after N - 1 steps, before this limit.
        return environment.EnvParams(max_steps_in_episode=self.num_cards)

    def step_env(self, key, state, action, params):
        t = state.time
        target = state.cards[jnp.maximum(t + 1 - self.k, 0)]
        scored = jnp.where(action == target, 1.0, -1.0) / (self.num_cards - self.k)
        reward = jnp.where(t + 1 >= self.k, scored, 0.0)
        state = state.replace(time=t + 1)
        terminated = state.time == self.num_cards - 1
        return self.get_obs(state), state, reward, terminated, {}

    def reset_env(self, key, params):
        cards = jax.random.permutation(key, jnp.arange(self.num_cards) % NUM_SUITS)
        state = RepeatPreviousState(time=0, cards=cards)
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None):
        return jax.nn.one_hot(state.cards[state.time], NUM_SUITS)

    def action_space(self, params=None):
        return spaces.Discrete(NUM_SUITS)

    def observation_space(self, params=None):
        return spaces.Box(0.0, 1.0, (NUM_SUITS,), jnp.float32)


class CountRecall(environment.Environment):
    """Count the value cards of the queried type (POPGym's CountRecall; definition in the module docstring)."""

    def __init__(self, num_decks: int = 1, num_types: int = 2):
        super().__init__()
        self.num_cards, self.num_types = DECK_SIZE * num_decks, num_types
        if num_types not in (2, 4, 13):
            raise ValueError(f"CountRecall: num_types={num_types}: cards have 2 colours, 4 suits or 13 ranks.")
        self.max_count = self.num_cards // num_types

    @property
    def default_params(self) -> environment.EnvParams:
        return environment.EnvParams(max_steps_in_episode=self.num_cards)

    def step_env(self, key, state, action, params):
        t = state.time
        asked = state.counts[state.queries[t]]
        reward = jnp.where(action == asked, 1.0, -1.0) / (self.num_cards - 1)
        counts = state.counts.at[state.values[t + 1]].add(1)
        state = state.replace(time=t + 1, counts=counts)
        terminated = state.time == self.num_cards - 1
        return self.get_obs(state), state, reward, terminated, {}

    def reset_env(self, key, params):
        k_values, k_queries = jax.random.split(key)
        types = jnp.arange(self.num_cards) % self.num_types
        values = jax.random.permutation(k_values, types)
        queries = jax.random.permutation(k_queries, types)
        counts = jnp.zeros(self.num_types, jnp.int32).at[values[0]].add(1)
        state = CountRecallState(time=0, values=values, queries=queries, counts=counts)
        return self.get_obs(state), state

    def get_obs(self, state, params=None, key=None):
        t = state.time
        return jnp.concatenate(
            [jax.nn.one_hot(state.values[t], self.num_types), jax.nn.one_hot(state.queries[t], self.num_types)]
        )

    def action_space(self, params=None):
        return spaces.Discrete(self.max_count + 1)

    def observation_space(self, params=None):
        return spaces.Box(0.0, 1.0, (2 * self.num_types,), jnp.float32)


class _PositionsOnly:
    """A gymnax control task that shows only the observation entries `KEEP`, with episodes of
    `max_episode_length` steps and the reward `scaled_reward(reward)` (mixed in before the task's class)."""

    KEEP: tuple[int, ...] = ()

    def __init__(self, max_episode_length: int = 200):
        super().__init__()
        self.max_episode_length = max_episode_length
        self.obs_shape = (len(self.KEEP),)

    @property
    def default_params(self):
        return super().default_params.replace(max_steps_in_episode=self.max_episode_length)

    def step_env(self, key, state, action, params):
        obs, state, reward, terminated, info = super().step_env(key, state, action, params)
        return obs[jnp.array(self.KEEP)], state, self.scaled_reward(reward), terminated, info

    def reset_env(self, key, params):
        obs, state = super().reset_env(key, params)
        return obs[jnp.array(self.KEEP)], state

    @property
    def name(self) -> str:
        return type(self).__name__


class PositionOnlyCartPole(_PositionsOnly, CartPole):
    """CartPole observing positions only (POPGym's PositionOnlyCartPole; definition in the module docstring)."""

    KEEP = (0, 2)  # cart position, pole angle

    def scaled_reward(self, reward):
        return reward / self.max_episode_length

    def observation_space(self, params):
        high = jnp.array([params.x_threshold * 2, params.theta_threshold_radians * 2], jnp.float32)
        return spaces.Box(-high, high, (2,), jnp.float32)


class PositionOnlyPendulum(_PositionsOnly, Pendulum):
    """Pendulum observing its angle only (POPGym's PositionOnlyPendulum; definition in the module docstring)."""

    KEEP = (0, 1)  # cos and sin of the angle

    def scaled_reward(self, reward):
        return (reward / PENDULUM_HALF_RANGE + 1.0) / self.max_episode_length

    def observation_space(self, params):
        return spaces.Box(-1.0, 1.0, (2,), jnp.float32)


# id -> (class, constructor arguments): POPGym's levels
TASKS = {
    "popgym-RepeatPreviousEasy-v0": (RepeatPrevious, {"num_decks": 1, "k": 4}),
    "popgym-RepeatPreviousMedium-v0": (RepeatPrevious, {"num_decks": 2, "k": 32}),
    "popgym-RepeatPreviousHard-v0": (RepeatPrevious, {"num_decks": 3, "k": 64}),
    "popgym-CountRecallEasy-v0": (CountRecall, {"num_decks": 1, "num_types": 2}),
    "popgym-CountRecallMedium-v0": (CountRecall, {"num_decks": 2, "num_types": 4}),
    "popgym-CountRecallHard-v0": (CountRecall, {"num_decks": 4, "num_types": 13}),
    "popgym-PositionOnlyCartPoleEasy-v0": (PositionOnlyCartPole, {"max_episode_length": 200}),
    "popgym-PositionOnlyCartPoleMedium-v0": (PositionOnlyCartPole, {"max_episode_length": 400}),
    "popgym-PositionOnlyCartPoleHard-v0": (PositionOnlyCartPole, {"max_episode_length": 600}),
    "popgym-PositionOnlyPendulumEasy-v0": (PositionOnlyPendulum, {"max_episode_length": 200}),
    "popgym-PositionOnlyPendulumMedium-v0": (PositionOnlyPendulum, {"max_episode_length": 150}),
    "popgym-PositionOnlyPendulumHard-v0": (PositionOnlyPendulum, {"max_episode_length": 100}),
}


def make(env_id: str, **env_params):
    """(env, params) of the task `env_id`: keywords that name a field of its params override it, the others
    replace its constructor arguments."""
    cls, kwargs = TASKS[env_id]
    probe_params = cls(**kwargs).default_params
    fields = set(probe_params.__dataclass_fields__)
    env = cls(**{**kwargs, **{k: v for k, v in env_params.items() if k not in fields}})
    return env, env.default_params.replace(**{k: v for k, v in env_params.items() if k in fields})
