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


def masked_mean(x: jax.Array, mask: jax.Array) -> jax.Array:
    """sum(mask * x) / max(sum(mask), 1): the mean over the valid elements (0 when there are none)."""
    chex.assert_equal_shape([x, mask])
    mask = mask.astype(x.dtype)
    return (x * mask).sum() / jnp.maximum(mask.sum(), 1.0)


def truncated_importance_surrogate_loss(
    log_prob: jax.Array,
    proximal_log_prob: jax.Array,
    behaviour_log_prob: jax.Array,
    advantages: jax.Array,
    clip_eps,
    rho_bar,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The clipped surrogate for data collected by an older behaviour policy mu, decoupled as in Hilton et al.
    2022 ("Batch size-invariance for policy optimization", arXiv 2110.00641, eq. 2): the proximal policy
    pi_prox (the parameters at the start of this update) anchors the clipping, and the behaviour correction is a
    truncated importance weight (as V-trace's rho-bar, Espeholt et al. 2018) without gradient:

        w    = min(rho_bar, pi_prox(a|s) / mu(a|s))
        loss = -w * min(r A, clip(r, 1 - eps, 1 + eps) A),   r = pi(a|s) / pi_prox(a|s)

    With pi_prox = mu (fresh on-policy data) and rho_bar >= 1, w = 1 and this is `clipped_surrogate_loss`.
    Returns (loss, clipped, w).
    """
    chex.assert_equal_shape([log_prob, proximal_log_prob, behaviour_log_prob, advantages])
    weight = jax.lax.stop_gradient(jnp.minimum(rho_bar, jnp.exp(proximal_log_prob - behaviour_log_prob)))
    loss, clipped = clipped_surrogate_loss(log_prob, jax.lax.stop_gradient(proximal_log_prob), advantages, clip_eps)
    return weight * loss, clipped, weight


def approx_kl(log_prob: jax.Array, behaviour_log_prob: jax.Array) -> jax.Array:
    """The k3 estimator of KL(mu || pi) per sample: (rho - 1) - log rho (Schulman 2020, "Approximating KL")."""
    log_ratio = log_prob - behaviour_log_prob
    return jnp.expm1(log_ratio) - log_ratio


# ---------------------------------------------------------------------------------------------------------------
# Value-based losses: Q(s, a) of action values and the losses of a TD error.
# ---------------------------------------------------------------------------------------------------------------


def action_value(q: jax.Array, actions: jax.Array) -> jax.Array:
    """Q(s, a) [...] from action values q [..., A] and integer actions [...]."""
    chex.assert_rank(q, actions.ndim + 1)
    chex.assert_type(actions, int)
    return jnp.take_along_axis(q, actions[..., None].astype(jnp.int32), axis=-1)[..., 0]


def huber(x: jax.Array, delta=1.0) -> jax.Array:
    """Huber loss (Huber 1964) of an error x, element-wise: quadratic near 0, linear beyond |x| = delta,

        0.5 x^2                     if |x| <= delta
        delta (|x| - 0.5 delta)     otherwise

    Its gradient is the error clipped to [-delta, delta], the "error clipping" of DQN (Mnih et al. 2015).
    """
    abs_x = jnp.abs(x)
    quadratic = jnp.minimum(abs_x, delta)
    return 0.5 * quadratic**2 + delta * (abs_x - quadratic)


def l2(x: jax.Array) -> jax.Array:
    """Squared error 0.5 x^2, element-wise."""
    return 0.5 * jnp.square(x)


def policy_gradient_loss(log_prob: jax.Array, behaviour_log_prob: jax.Array, advantages: jax.Array) -> jax.Array:
    """The importance-weighted policy-gradient loss, negated to be minimised:

        rho  = exp(log pi(a|s) - log mu(a|s))
        loss = -rho * A

    with `advantages` A held constant (`stop_gradient`). Its gradient is -A grad rho = -rho A grad log pi(a|s).
    On fresh on-policy data (pi = mu, rho = 1) that is the REINFORCE / actor-critic score-function gradient
    -A grad log pi(a|s) (Williams 1992; Sutton et al. 2000; Mnih et al. 2016), and so is PPO's clipped surrogate's
    at rho = 1. Its negated mean is TRPO's surrogate objective L(theta) (Schulman et al. 2015, eq. 14).
    """
    chex.assert_equal_shape([log_prob, behaviour_log_prob, advantages])
    return -jnp.exp(log_prob - behaviour_log_prob) * jax.lax.stop_gradient(advantages)


def critic_loss(q: jax.Array, targets: jax.Array) -> jax.Array:
    """sum_k mean_b (Q_k(o_b, a_b) - y_b)^2 over K critics q [K, B] and fixed targets y [B]: every critic
    regresses on the same target, as in TD3 (Fujimoto et al. 2018) and SAC (Haarnoja et al. 2018)."""
    chex.assert_rank(q, 2)
    chex.assert_equal_shape([q[0], targets])
    return jnp.sum(jnp.mean((q - jax.lax.stop_gradient(targets)) ** 2, axis=-1))
