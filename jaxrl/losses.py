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
# Value-based TD errors. Per element over any leading batch shape `[...]`; action values `q_t` carry a trailing
# action axis `[..., A]`. `terminated_t` (s_t is terminal) zeroes the bootstrap; a truncated transition bootstraps
# as usual, which is right when `q_t` was computed on the true final observation (`Trajectory.next_obs`).
# Each returns the TD error `target - q_tm1_a` with the target under `stop_gradient` (as rlax does by default),
# so minimising `huber(td)` or `l2(td)` moves only Q(s_tm1, a_tm1). `gamma` is a scalar (may be traced).
# ---------------------------------------------------------------------------------------------------------------


def _check_td(q_tm1_a, r_t, terminated_t, gamma, action_arrays=(), aligned=()):
    chex.assert_equal_shape([q_tm1_a, r_t, terminated_t, *aligned])
    chex.assert_type([q_tm1_a, r_t], float)
    chex.assert_rank(gamma, 0)
    for q in action_arrays:
        chex.assert_type(q, float)
        chex.assert_rank(q, r_t.ndim + 1)
        chex.assert_equal_shape_prefix([q, r_t], r_t.ndim)
    chex.assert_equal_shape(list(action_arrays))


def _td_error(q_tm1_a, r_t, terminated_t, v_t, gamma):
    target = r_t + gamma * (1.0 - terminated_t.astype(jnp.float32)) * v_t
    return jax.lax.stop_gradient(target) - q_tm1_a


def action_value(q: jax.Array, actions: jax.Array) -> jax.Array:
    """Q(s, a) [...] from action values q [..., A] and integer actions [...]."""
    chex.assert_rank(q, actions.ndim + 1)
    chex.assert_type(actions, int)
    return jnp.take_along_axis(q, actions[..., None].astype(jnp.int32), axis=-1)[..., 0]


def q_learning_td(q_tm1_a: jax.Array, r_t: jax.Array, terminated_t: jax.Array, q_t: jax.Array, gamma) -> jax.Array:
    """Q-learning TD error (Watkins 1989, "Learning from Delayed Rewards"; Watkins & Dayan 1992):

        delta = r_t + gamma (1 - terminated_t) max_a q_t[a] - q_tm1_a

    Args: q_tm1_a = Q(s_tm1, a_tm1) [...]; r_t [...]; terminated_t [...] bool or float; q_t = Q(s_t, .) [..., A]
    (in DQN from the target network, Mnih et al. 2015); gamma scalar.
    """
    _check_td(q_tm1_a, r_t, terminated_t, gamma, [q_t])
    return _td_error(q_tm1_a, r_t, terminated_t, q_t.max(-1), gamma)


def double_q_learning_td(
    q_tm1_a: jax.Array, r_t: jax.Array, terminated_t: jax.Array, q_t_target: jax.Array, q_t_online: jax.Array, gamma
) -> jax.Array:
    """Double Q-learning TD error (van Hasselt, Guez & Silver 2016, "Deep Reinforcement Learning with Double
    Q-learning", eq. 4): the online network selects the action, the target network evaluates it,

        delta = r_t + gamma (1 - terminated_t) q_t_target[argmax_a q_t_online[a]] - q_tm1_a

    Ties in the argmax go to the first action (as `jnp.argmax` and rlax).
    """
    _check_td(q_tm1_a, r_t, terminated_t, gamma, [q_t_target, q_t_online])
    v_t = action_value(q_t_target, jnp.argmax(q_t_online, axis=-1))
    return _td_error(q_tm1_a, r_t, terminated_t, v_t, gamma)


def sarsa_td(
    q_tm1_a: jax.Array, r_t: jax.Array, terminated_t: jax.Array, q_t: jax.Array, a_t: jax.Array, gamma
) -> jax.Array:
    """SARSA TD error (Rummery & Niranjan 1994; Sutton & Barto 2018, Sec. 6.4), bootstrapping on the action
    a_t actually taken in s_t:

        delta = r_t + gamma (1 - terminated_t) q_t[a_t] - q_tm1_a
    """
    _check_td(q_tm1_a, r_t, terminated_t, gamma, [q_t], [a_t])
    return _td_error(q_tm1_a, r_t, terminated_t, action_value(q_t, a_t), gamma)


def expected_sarsa_td(
    q_tm1_a: jax.Array, r_t: jax.Array, terminated_t: jax.Array, q_t: jax.Array, probs_t: jax.Array, gamma
) -> jax.Array:
    """Expected SARSA TD error (van Seijen, van Hasselt, Whiteson & Wiering 2009, "A Theoretical and Empirical
    Analysis of Expected Sarsa"), bootstrapping on the expectation under the policy's probabilities in s_t:

        delta = r_t + gamma (1 - terminated_t) sum_a probs_t[a] q_t[a] - q_tm1_a
    """
    _check_td(q_tm1_a, r_t, terminated_t, gamma, [q_t, probs_t])
    return _td_error(q_tm1_a, r_t, terminated_t, (probs_t * q_t).sum(-1), gamma)


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
