"""Heads: what each algorithm family reads off a torso (`jaxrl.networks.torsos`).

- `ActorCritic`: separate actor and critic (each a torso + linear output): a categorical or diagonal-Gaussian
  policy and a state value (PPO, A2C, REINFORCE, TRPO, IMPALA, GRPO's actor).
- `ActorQCritic`: a categorical actor and an action-value critic Q(o, .) (IMPALA with Retrace).
- `QNetwork`: action values Q(o, .), optionally dueling (DQN, PQN, SARSA); `epsilon_greedy` is their policy.
- `DeterministicActor`, `GaussianActor` (+ `squashed_gaussian`), `QCritic`, `Critics`: the continuous-control
  off-policy heads (DDPG, TD3, SAC), in actions normalised to [-1, 1]^A.

Output gains: 0.01 for policy outputs (a near-uniform / centred initial policy), 1.0 for values.

Action masks: a discrete head built with `action_mask=True` (from `EnvSpec.action_mask`) reads the valid actions
off its observation's tail (`envs.action_mask`) and outputs `MASKED` (float32's finfo.min) for the others, as
logits or as action values. Masking the head's output, in one place, makes every consumer respect the mask
unchanged: a categorical's softmax, sample, mode, log-prob and entropy give masked actions probability 0, an
argmax or max over action values (greedy choices, Q-learning targets, double DQN) never picks them, and
`epsilon_greedy` explores only among the actions whose value is above `MASKED`. finfo.min rather than -inf keeps
0 * masked = 0 (entropies, expectations) and the gradients finite.

distrax (and TensorFlow Probability under it) is imported where a distribution is built, at trace time: a process
that only checks a config or a command line never loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl.envs import action_mask
from jaxrl.networks.initialisation import per_key_draws
from jaxrl.networks.torsos import MLPTorso, Torso, dense, flatten_observation

if TYPE_CHECKING:
    import distrax

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # the squashed Gaussian actor's log std range (as in CleanRL's SAC)
MASKED = float(jnp.finfo(jnp.float32).min)  # the logit / action value of a masked action


def mask_actions(out: jax.Array, obs: jax.Array) -> jax.Array:
    """Logits or action values `out` [..., A] with `MASKED` at the actions the observations `obs` [..., D] mark
    invalid (`envs.action_mask`: the last A entries of each observation)."""
    return jnp.where(action_mask(obs, out.shape[-1]), out, MASKED)


class TorsoHead(nn.Module):
    """torso(x) followed by a linear layer of `out_features` with orthogonal(`out_gain`) initialisation."""

    torso: MLPTorso
    out_features: int
    out_gain: float

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.torso(x)  # first: flax names layers in the order they are built
        return dense(self.out_features, self.out_gain)(x)


class ActorCritic(nn.Module):
    """Separate actor and critic networks on one kind of torso. `__call__(obs) -> (distribution, value)`.

    Discrete actions get a categorical head over `action_dim` logits (masked with `action_mask`); continuous
    actions a diagonal Gaussian with a state-independent learned log standard deviation.
    """

    action_dim: int
    discrete: bool
    torso: MLPTorso = MLPTorso()
    action_mask: bool = False
    mean_bounds: tuple[tuple[float, ...], tuple[float, ...]] | None = None  # (low, high): a mean inside the box

    def setup(self):
        self.actor = TorsoHead(self.torso, self.action_dim, 0.01)
        self.critic = TorsoHead(self.torso, 1, 1.0)
        if not self.discrete:
            self.log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))

    def __call__(self, obs: jax.Array) -> tuple[distrax.Distribution, jax.Array]:
        return self.policy(obs), self.value(obs)

    def policy(self, obs: jax.Array) -> distrax.Distribution:
        import distrax

        out = self.actor(obs)
        if self.discrete:
            return distrax.Categorical(logits=mask_actions(out, obs) if self.action_mask else out)
        if self.mean_bounds is not None:
            low, high = (jnp.asarray(b, out.dtype) for b in self.mean_bounds)
            out = low + 0.5 * (jnp.tanh(out) + 1.0) * (high - low)
        return distrax.MultivariateNormalDiag(out, jnp.exp(self.log_std))

    def value(self, obs: jax.Array) -> jax.Array:
        return self.critic(obs)[..., 0]


class ActorQCritic(nn.Module):
    """A categorical actor and an action-value critic Q(o, .) [..., action_dim], separate networks.

    `value(obs)` is the policy's expected action value E_{a ~ pi} Q(o, a), the state value a Retrace learner
    bootstraps from. With `action_mask` the actor's logits are masked (the critic's values are not: a masked
    action's value is weighted by its probability 0).
    """

    action_dim: int
    torso: MLPTorso = MLPTorso()
    action_mask: bool = False

    def setup(self):
        self.actor = TorsoHead(self.torso, self.action_dim, 0.01)
        self.critic = TorsoHead(self.torso, self.action_dim, 1.0)

    def __call__(self, obs: jax.Array) -> tuple[distrax.Distribution, jax.Array]:
        return self.policy(obs), self.q_values(obs)

    def logits(self, obs: jax.Array) -> jax.Array:
        out = self.actor(obs)
        return mask_actions(out, obs) if self.action_mask else out

    def policy(self, obs: jax.Array) -> distrax.Distribution:
        import distrax

        return distrax.Categorical(logits=self.logits(obs))

    def q_values(self, obs: jax.Array) -> jax.Array:
        return self.critic(obs)

    def value(self, obs: jax.Array) -> jax.Array:
        return jnp.sum(jax.nn.softmax(self.logits(obs)) * self.critic(obs), axis=-1)


def q_values(x: jax.Array, action_dim: int, dueling: bool) -> jax.Array:
    """The Q head on features `x`, inside a compact module: a linear layer, or dueling (Wang et al. 2016,
    arXiv 1511.06581) Q = V + A - mean_a A."""
    if not dueling:
        return dense(action_dim, 1.0)(x)
    value = dense(1, 1.0)(x)
    advantage = dense(action_dim, 1.0)(x)
    return value + advantage - advantage.mean(-1, keepdims=True)


class QNetwork(nn.Module):
    """Action values Q(o, .) [..., action_dim] on a torso.

    `dueling` splits the output into a state value and centred advantages (Wang et al. 2016, eq. 9):
    Q(o, a) = V(o) + A(o, a) - mean_a' A(o, a'). With `action_mask`, masked actions' values are `MASKED`.
    """

    action_dim: int
    torso: MLPTorso = MLPTorso((64, 64), "relu")
    dueling: bool = False
    action_mask: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        q = q_values(self.torso(obs), self.action_dim, self.dueling)
        return mask_actions(q, obs) if self.action_mask else q


def epsilon_greedy(q_values: jax.Array, epsilon) -> distrax.Categorical:
    """The epsilon-greedy policy over q_values [..., A]: a uniform action among the valid ones (value above
    `MASKED`; all of them without a mask) with probability epsilon, else the greedy one (ties to the first), i.e.
    probs = epsilon valid / sum(valid) + (1 - epsilon) onehot(argmax q). Its log_prob is the behaviour
    log-probability an off-policy correction needs."""
    import distrax

    num_actions = q_values.shape[-1]
    greedy = jax.nn.one_hot(jnp.argmax(q_values, axis=-1), num_actions)
    valid = q_values > MASKED
    uniform = epsilon * valid / valid.sum(-1, keepdims=True)  # epsilon / A exactly where nothing is masked
    return distrax.Categorical(probs=uniform + (1.0 - epsilon) * greedy)


class DeterministicActor(nn.Module):
    """mu(o) = tanh(torso(o) W) in [-1, 1]^action_dim (Lillicrap et al. 2016; Fujimoto et al. 2018)."""

    action_dim: int
    torso: MLPTorso = MLPTorso((256, 256), "relu")

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = Torso(self.torso)(obs)
        return jnp.tanh(dense(self.action_dim, 0.01)(x))


class GaussianActor(nn.Module):
    """(mean, log_std) of a diagonal Gaussian over pre-squash actions u; log_std is squashed smoothly into
    [LOG_STD_MIN, LOG_STD_MAX] (a tanh rescale, which keeps gradients, unlike a clip)."""

    action_dim: int
    torso: MLPTorso = MLPTorso((256, 256), "relu")

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = Torso(self.torso)(obs)
        mean = dense(self.action_dim, 0.01)(x)
        log_std = jnp.tanh(dense(self.action_dim, 0.01)(x))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)
        return mean, log_std


def squashed_gaussian(mean: jax.Array, log_std: jax.Array) -> distrax.Distribution:
    """a = tanh(u), u ~ N(mean, diag(exp(log_std)^2)): a distribution on the open box (-1, 1)^A (SAC, Haarnoja
    et al. 2018, Appendix C).

    By the change of variables (Haarnoja et al. 2018, eq. 21),
      log pi(a) = log N(u; mean, std) - sum_i log(1 - tanh(u_i)^2),
    which distrax's `Tanh` bijector computes stably from u as 2 (log 2 - u - softplus(-2u)). Use
    `sample_and_log_prob`, which never inverts tanh (`log_prob(a)` of a saturated a = +-1 is -inf / NaN).
    """
    import distrax

    base = distrax.MultivariateNormalDiag(mean, jnp.exp(log_std))
    return distrax.Transformed(base, distrax.Block(distrax.Tanh(), ndims=1))


class QCritic(nn.Module):
    """Q(o, a) [...] from a torso over [flatten(o), a] (the torso's `obs_ndim` flattens o first)."""

    torso: MLPTorso = MLPTorso((256, 256), "relu")

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([flatten_observation(obs, self.torso.obs_ndim), action], axis=-1)
        encoder = MLPTorso(self.torso.hidden_sizes, self.torso.activation, self.torso.layer_norm, obs_ndim=1)
        x = Torso(encoder)(x)
        return dense(1, 1.0)(x)[..., 0]


class Critics(nn.Module):
    """`num_critics` independently initialised QCritics: `__call__(obs, action) -> Q [num_critics, ...]`.

    Their parameters are stacked along a leading axis of size `num_critics` (`nn.vmap` with its own init key per
    critic, `initialisation.per_key_draws` even under `init_params`), so twin critics cost one batched matmul per
    layer instead of two.
    """

    num_critics: int = 2
    torso: MLPTorso = MLPTorso((256, 256), "relu")

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        ensemble = nn.vmap(
            QCritic,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=None,
            out_axes=0,
            axis_size=self.num_critics,
        )
        with per_key_draws():  # nn.vmap calls each layer once for all critics: one frame would serve them all
            return ensemble(self.torso)(obs, action)
