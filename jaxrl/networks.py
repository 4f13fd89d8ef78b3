"""Flax networks: MLP torso and an actor-critic returning a distrax distribution and a value.

Orthogonal initialisation as in the PPO literature (Engstrom et al. 2020, "Implementation Matters";
Andrychowicz et al. 2021): gain sqrt(2) for hidden layers, 0.01 for the policy output, 1.0 for the value.
"""

from collections.abc import Sequence

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}


def orthogonal(gain: float = 1.0):
    """Orthogonal initialiser (Saxe et al. 2014) built from matmuls only.

    Same distribution as `jax.nn.initializers.orthogonal` (the Q of a Gaussian matrix with R's diagonal made
    positive), but Q comes from Gram-Schmidt applied twice ("twice is enough", Giraud et al. 2005) instead of
    LAPACK's geqrf. Under `jax.vmap` on CPU, jaxlib's batched geqrf fans out over the XLA intra-op thread pool
    and blocks a worker of that same pool waiting for it; inside a vmapped training program on 2 cores this
    deadlocked at 0% CPU (seen with jaxlib 0.10.2). Matmuls cannot.
    """

    def init(key, shape, dtype=jnp.float32):
        rows, cols = int(np.prod(shape[:-1])), shape[-1]
        tall = (max(rows, cols), min(rows, cols))
        a = jax.random.normal(key, tall, jnp.float32)

        def column(q, j):
            v = a[:, j]
            v = v - q @ (q.T @ v)  # unfilled columns of q are zero and project nothing
            v = v - q @ (q.T @ v)
            return q.at[:, j].set(v / jnp.linalg.norm(v)), None

        q, _ = jax.lax.scan(column, jnp.zeros(tall, jnp.float32), jnp.arange(tall[1]))
        q = q if rows >= cols else q.T
        return (gain * q).reshape(shape).astype(dtype)

    return init


def dense(features: int, gain: float) -> nn.Dense:
    return nn.Dense(features, kernel_init=orthogonal(gain), bias_init=nn.initializers.zeros)


class MLP(nn.Module):
    """Flattens trailing observation dims and applies hidden layers, then a linear output layer."""

    hidden_sizes: Sequence[int]
    out_features: int
    out_gain: float
    activation: str = "tanh"
    obs_ndim: int = 1

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = x.reshape(x.shape[: x.ndim - self.obs_ndim] + (-1,))
        act = ACTIVATIONS[self.activation]
        for size in self.hidden_sizes:
            x = act(dense(size, np.sqrt(2))(x))
        return dense(self.out_features, self.out_gain)(x)


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs. `__call__(obs) -> (distribution, value)`; `value(obs) -> value`.

    Discrete actions get a categorical head over `action_dim` logits; continuous actions a diagonal
    Gaussian with a state-independent learned log standard deviation.
    """

    action_dim: int
    discrete: bool
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    obs_ndim: int = 1

    def setup(self):
        self.actor = MLP(self.hidden_sizes, self.action_dim, 0.01, self.activation, self.obs_ndim)
        self.critic = MLP(self.hidden_sizes, 1, 1.0, self.activation, self.obs_ndim)
        if not self.discrete:
            self.log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))

    def __call__(self, obs: jax.Array) -> tuple[distrax.Distribution, jax.Array]:
        return self.policy(obs), self.value(obs)

    def policy(self, obs: jax.Array) -> distrax.Distribution:
        out = self.actor(obs)
        if self.discrete:
            return distrax.Categorical(logits=out)
        return distrax.MultivariateNormalDiag(out, jnp.exp(self.log_std))

    def value(self, obs: jax.Array) -> jax.Array:
        return self.critic(obs)[..., 0]


class QNetwork(nn.Module):
    """Action values Q(o, .) [..., action_dim] from an MLP torso.

    `layer_norm` puts a LayerNorm (Ba et al. 2016) before each hidden activation, as PQN does (Gallici et al.
    2024). `dueling` splits the output into a state value and centred advantages (Wang et al. 2016, eq. 9):
    Q(o, a) = V(o) + A(o, a) - mean_a' A(o, a').
    """

    action_dim: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "relu"
    dueling: bool = False
    layer_norm: bool = False
    obs_ndim: int = 1

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = obs.reshape(obs.shape[: obs.ndim - self.obs_ndim] + (-1,))
        act = ACTIVATIONS[self.activation]
        for size in self.hidden_sizes:
            x = dense(size, np.sqrt(2))(x)
            if self.layer_norm:
                x = nn.LayerNorm()(x)
            x = act(x)
        if not self.dueling:
            return dense(self.action_dim, 1.0)(x)
        value = dense(1, 1.0)(x)
        advantage = dense(self.action_dim, 1.0)(x)
        return value + advantage - advantage.mean(-1, keepdims=True)


def epsilon_greedy(q_values: jax.Array, epsilon) -> distrax.Categorical:
    """The epsilon-greedy policy over q_values [..., A]: a uniform action with probability epsilon, else the
    greedy one (ties to the first), i.e. probs = epsilon / A + (1 - epsilon) onehot(argmax q). Its log_prob is
    the behaviour log-probability an off-policy correction needs."""
    num_actions = q_values.shape[-1]
    greedy = jax.nn.one_hot(jnp.argmax(q_values, axis=-1), num_actions)
    return distrax.Categorical(probs=epsilon / num_actions + (1.0 - epsilon) * greedy)


class ActorQCritic(nn.Module):
    """A categorical actor and an action-value critic Q(o, .) [..., action_dim], separate MLPs.

    `value(obs)` is the policy's expected action value E_{a ~ pi} Q(o, a), the state value a Retrace learner
    bootstraps from.
    """

    action_dim: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    obs_ndim: int = 1

    def setup(self):
        self.actor = MLP(self.hidden_sizes, self.action_dim, 0.01, self.activation, self.obs_ndim)
        self.critic = MLP(self.hidden_sizes, self.action_dim, 1.0, self.activation, self.obs_ndim)

    def __call__(self, obs: jax.Array) -> tuple[distrax.Distribution, jax.Array]:
        return self.policy(obs), self.q_values(obs)

    def policy(self, obs: jax.Array) -> distrax.Distribution:
        return distrax.Categorical(logits=self.actor(obs))

    def q_values(self, obs: jax.Array) -> jax.Array:
        return self.critic(obs)

    def value(self, obs: jax.Array) -> jax.Array:
        return jnp.sum(jax.nn.softmax(self.actor(obs)) * self.critic(obs), axis=-1)
