"""Per-element losses. Callers reduce them (mean, or a masked mean) themselves."""

import chex
import jax
import jax.numpy as jnp


def clipped_surrogate_loss(
    log_prob: jax.Array, behaviour_log_prob: jax.Array, advantages: jax.Array, clip_eps
) -> tuple[jax.Array, jax.Array]:
    """PPO's clipped surrogate (Schulman et al. 2017, arXiv 1707.06347, eq. 7), negated to be minimised.

        rho = exp(log pi(a|s) - log mu(a|s))
        loss = -min(rho * A, clip(rho, 1 - eps, 1 + eps) * A)

    Returns (loss, clipped) where `clipped` marks elements whose ratio left [1 - eps, 1 + eps].
    """
    chex.assert_equal_shape([log_prob, behaviour_log_prob, advantages])
    ratio = jnp.exp(log_prob - behaviour_log_prob)
    clipped_ratio = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    loss = -jnp.minimum(ratio * advantages, clipped_ratio * advantages)
    return loss, jnp.abs(ratio - 1.0) > clip_eps


def value_loss(values: jax.Array, targets: jax.Array, old_values: jax.Array | None = None, clip_eps=None) -> jax.Array:
    """Squared error 0.5 (V - G)^2; with `old_values` and `clip_eps`, PPO's clipped value loss
    0.5 max((V - G)^2, (V_old + clip(V - V_old, -eps, eps) - G)^2) (Schulman et al. 2017, as in baselines).
    """
    chex.assert_equal_shape([values, targets])
    loss = jnp.square(values - targets)
    if old_values is not None:
        clipped = old_values + jnp.clip(values - old_values, -clip_eps, clip_eps)
        loss = jnp.maximum(loss, jnp.square(clipped - targets))
    return 0.5 * loss


def approx_kl(log_prob: jax.Array, behaviour_log_prob: jax.Array) -> jax.Array:
    """The k3 estimator of KL(mu || pi) per sample: (rho - 1) - log rho (Schulman 2020, "Approximating KL")."""
    log_ratio = log_prob - behaviour_log_prob
    return jnp.expm1(log_ratio) - log_ratio
