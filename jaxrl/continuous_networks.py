"""Flax networks of the continuous-control off-policy algorithms (DDPG, TD3, SAC).

Actions here live in the normalised box [-1, 1]^A; `jaxrl.continuous.ScaleAction` maps them to the env's
[low, high] at the env boundary, so the actors, the critics and the replay never see the env's units.

- `DeterministicActor`: mu(o) = tanh(MLP(o)) (Lillicrap et al. 2016; Fujimoto et al. 2018).
- `GaussianActor`: the mean and log standard deviation of a Gaussian over pre-squash actions; `squashed_gaussian`
  turns them into the tanh-squashed distribution of SAC (Haarnoja et al. 2018, Appendix C).
- `QCritic`: Q(o, a) from an MLP over the concatenation [o, a]; `Critics`: K independent QCritics as one module
  (`nn.vmap` over stacked parameters [K, ...]), the twin critics of TD3 and SAC in one batched matmul per layer.

Hidden layers use jaxrl's orthogonal initialisation with gain sqrt(2) (`networks.dense`); the output layers are
small (gain 0.01 for actors, so the initial policy is near the box's centre, 1.0 for critics).
"""

from collections.abc import Sequence

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.networks import ACTIVATIONS, dense

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # the Gaussian actor's log std range (as in CleanRL's SAC)


class Torso(nn.Module):
    """Hidden layers of an MLP over the flattened trailing `obs_ndim` dims of `x`, optionally LayerNorm'd."""

    hidden_sizes: Sequence[int]
    activation: str = "relu"
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        for size in self.hidden_sizes:
            x = dense(size, np.sqrt(2))(x)
            if self.layer_norm:
                x = nn.LayerNorm()(x)
            x = act(x)
        return x


def _flatten(obs: jax.Array, obs_ndim: int) -> jax.Array:
    return obs.reshape(obs.shape[: obs.ndim - obs_ndim] + (-1,))


class DeterministicActor(nn.Module):
    """mu(o) = tanh(MLP(o)) in [-1, 1]^action_dim."""

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    obs_ndim: int = 1

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = Torso(self.hidden_sizes, self.activation)(_flatten(obs, self.obs_ndim))
        return jnp.tanh(dense(self.action_dim, 0.01)(x))


class GaussianActor(nn.Module):
    """(mean, log_std) of a diagonal Gaussian over pre-squash actions u; log_std is squashed smoothly into
    [LOG_STD_MIN, LOG_STD_MAX] (a tanh rescale, which keeps gradients, unlike a clip)."""

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    obs_ndim: int = 1

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = Torso(self.hidden_sizes, self.activation)(_flatten(obs, self.obs_ndim))
        mean = dense(self.action_dim, 0.01)(x)
        log_std = jnp.tanh(dense(self.action_dim, 0.01)(x))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)
        return mean, log_std


def squashed_gaussian(mean: jax.Array, log_std: jax.Array) -> distrax.Distribution:
    """a = tanh(u), u ~ N(mean, diag(exp(log_std)^2)): a distribution on the open box (-1, 1)^A.

    By the change of variables (Haarnoja et al. 2018, eq. 21),
      log pi(a) = log N(u; mean, std) - sum_i log(1 - tanh(u_i)^2),
    which distrax's `Tanh` bijector computes stably from u as 2 (log 2 - u - softplus(-2u)). Use
    `sample_and_log_prob`, which never inverts tanh (`log_prob(a)` of a saturated a = +-1 is -inf / NaN).
    """
    base = distrax.MultivariateNormalDiag(mean, jnp.exp(log_std))
    return distrax.Transformed(base, distrax.Block(distrax.Tanh(), ndims=1))


class QCritic(nn.Module):
    """Q(o, a) [...] from an MLP over [flatten(o), a]."""

    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    layer_norm: bool = False
    obs_ndim: int = 1

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([_flatten(obs, self.obs_ndim), action], axis=-1)
        x = Torso(self.hidden_sizes, self.activation, self.layer_norm)(x)
        return dense(1, 1.0)(x)[..., 0]


class Critics(nn.Module):
    """`num_critics` independently initialised QCritics: `__call__(obs, action) -> Q [num_critics, ...]`.

    Their parameters are stacked along a leading axis of size `num_critics` (`nn.vmap` with its own init key per
    critic), so twin critics cost one batched matmul per layer instead of two.
    """

    num_critics: int = 2
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    layer_norm: bool = False
    obs_ndim: int = 1

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
        return ensemble(self.hidden_sizes, self.activation, self.layer_norm, self.obs_ndim)(obs, action)
