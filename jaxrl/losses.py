"""Per-element losses. Callers reduce them (mean, or a masked mean) themselves."""

from collections.abc import Callable

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


def mask_weights(mask: jax.Array) -> jax.Array:
    """w = mask * n / max(sum(mask), 1) over the n elements of `mask`, so that mean(w * x) = `masked_mean(x, mask)`:
    a masked mean written as a mean over samples, which chunks of the samples can average
    (`minibatch.gradient_in_chunks`)."""
    valid = mask.astype(jnp.float32)
    return valid * (valid.size / jnp.maximum(valid.sum(), 1.0))


def valid_mean(mask: jax.Array, weights: jax.Array | None = None) -> Callable[[jax.Array], jax.Array]:
    """The mean over the valid elements, x -> `masked_mean(x, mask)`; given the samples' `mask_weights`, the same
    mean as x -> mean(weights * x), a mean over samples."""
    if weights is None:
        return lambda x: masked_mean(x, mask)
    return lambda x: jnp.mean(x * weights)


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


def dpo_loss(
    log_prob_w: jax.Array, ref_log_prob_w: jax.Array, log_prob_l: jax.Array, ref_log_prob_l: jax.Array, beta
) -> tuple[jax.Array, jax.Array]:
    """The DPO loss per preference pair (Rafailov et al. 2023, "Direct Preference Optimization", arXiv
    2305.18290, eq. 7), with log pi(y|x) the log-likelihood of a whole sample y (for control: a trajectory's
    log-probabilities summed over its valid steps):

        h    = r_hat(x, y_w) - r_hat(x, y_l),   r_hat(x, y) = beta (log pi(y|x) - log pi_ref(y|x))
        loss = -log sigmoid(h)

    Its gradient is -beta sigmoid(-h) (grad log pi(y_w|x) - grad log pi(y_l|x)) (eq. 8): the preferred sample's
    likelihood goes up, the rejected one's down, weighted by how wrongly the implicit reward ranks them. The
    reference log-probabilities are held constant (`stop_gradient`). Returns (loss [P], h [P]).
    """
    chex.assert_equal_shape([log_prob_w, ref_log_prob_w, log_prob_l, ref_log_prob_l])
    ref_w, ref_l = jax.lax.stop_gradient(ref_log_prob_w), jax.lax.stop_gradient(ref_log_prob_l)
    h = beta * ((log_prob_w - ref_w) - (log_prob_l - ref_l))
    return -jax.nn.log_sigmoid(h), h


def critic_loss(q: jax.Array, targets: jax.Array) -> jax.Array:
    """sum_k mean_b (Q_k(o_b, a_b) - y_b)^2 over K critics q [K, B] and fixed targets y [B]: every critic
    regresses on the same target, as in TD3 (Fujimoto et al. 2018) and SAC (Haarnoja et al. 2018)."""
    chex.assert_rank(q, 2)
    chex.assert_equal_shape([q[0], targets])
    return jnp.sum(jnp.mean((q - jax.lax.stop_gradient(targets)) ** 2, axis=-1))


# ---------------------------------------------------------------------------------------------------------------
# V-MPO (Song et al. 2019, "V-MPO: On-Policy Maximum a Posteriori Policy Optimization for Discrete and Continuous
# Control", arXiv 1909.12238): the E-step's top-half selection and temperature dual, the M-step's weighted
# maximum likelihood, its KL trust region's Lagrangian, and the decoupled Gaussian KL. These reduce over the batch
# themselves (the E-step's softmax normalises over the selected samples), so they return scalars or weights.
# ---------------------------------------------------------------------------------------------------------------


def vmpo_top_half(advantages: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """V-MPO's sample selection (Song et al. 2019, Sec. 4.1): the boolean mask of the ceil(n / 2) valid samples
    with the largest advantages, n the number of valid samples (`mask`, default all), over every axis at once.

    Exactly ceil(n / 2) samples are kept: ties at the boundary are broken by position (a stable sort), so a
    constant advantage keeps the first half. Paper: "we use only the highest 50% of advantages in each batch".
    """
    mask = jnp.ones(advantages.shape, bool) if mask is None else mask.astype(bool)
    chex.assert_equal_shape([advantages, mask])
    flat = jnp.where(mask, advantages, -jnp.inf).reshape(-1)
    order = jnp.argsort(-flat, stable=True)
    ranks = jnp.zeros(flat.shape, jnp.int32).at[order].set(jnp.arange(flat.size, dtype=jnp.int32))
    keep = (mask.sum() + 1) // 2
    return (ranks < keep).reshape(advantages.shape) & mask


def vmpo_temperature_loss(
    temperature: jax.Array, advantages: jax.Array, selected: jax.Array, epsilon_eta
) -> tuple[jax.Array, jax.Array]:
    """V-MPO's E-step (Song et al. 2019, eqs. 3-4): the temperature dual and the sample weights.

        L_eta = eta * epsilon_eta + eta * log( (1 / |D~|) sum_{(s,a) in D~} exp(A(s, a) / eta) )
        psi(s, a) = exp(A(s, a) / eta) / sum_{(s',a') in D~} exp(A(s', a') / eta)   for (s, a) in D~, else 0

    D~ the `selected` samples (`vmpo_top_half`), eta > 0 the scalar `temperature`. The log-mean-exp is computed
    as a logsumexp (stable for small eta). The advantages carry no gradient; the weights psi are computed with
    eta held constant (`stop_gradient`), so L_eta trains eta alone. Returns (L_eta, psi with `advantages`' shape,
    summing to 1 over D~).
    """
    chex.assert_equal_shape([advantages, selected])
    chex.assert_rank(temperature, 0)
    advantages = jax.lax.stop_gradient(advantages)
    selected = selected.astype(bool)
    count = jnp.maximum(selected.sum(), 1).astype(advantages.dtype)

    def log_sum_exp(eta):
        scaled = jnp.where(selected, advantages / eta, -jnp.inf)
        return jax.nn.logsumexp(scaled), scaled

    lse, _ = log_sum_exp(temperature)
    loss = temperature * epsilon_eta + temperature * (lse - jnp.log(count))
    lse_sg, scaled_sg = log_sum_exp(jax.lax.stop_gradient(temperature))
    weights = jnp.where(selected, jnp.exp(scaled_sg - lse_sg), 0.0)
    return loss, jax.lax.stop_gradient(weights)


def vmpo_policy_loss(log_prob: jax.Array, weights: jax.Array) -> jax.Array:
    """V-MPO's M-step weighted maximum likelihood (Song et al. 2019, eq. 5): L_pi = -sum_{D~} psi(s, a) log pi(a|s),
    with the E-step's weights psi held constant. A scalar."""
    chex.assert_equal_shape([log_prob, weights])
    return -jnp.sum(jax.lax.stop_gradient(weights) * log_prob)


def lagrange_loss(multiplier: jax.Array, kl: jax.Array, epsilon) -> jax.Array:
    """The KL trust region as a Lagrangian in V-MPO's form (Song et al. 2019, eq. 6):

        L_alpha = alpha * (epsilon_alpha - sg(KL)) + sg(alpha) * KL

    Its gradient in alpha, epsilon_alpha - KL, lowers alpha while the constraint KL <= epsilon_alpha holds and
    raises it when violated; its gradient in the policy is alpha * grad KL, the penalty. A scalar per multiplier
    (`multiplier` and `kl` broadcast)."""
    sg = jax.lax.stop_gradient
    return multiplier * (epsilon - sg(kl)) + sg(multiplier) * kl


def gaussian_kl_decomposed(
    mean_old: jax.Array, std_old: jax.Array, mean: jax.Array, std: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """KL(pi_old || pi) of diagonal Gaussians split into a mean and a covariance part, as V-MPO (Song et al. 2019,
    Appendix C, after Abdolmaleki et al. 2018) constrains them separately:

        KL_mu    = 1/2 (mu - mu_old)^T Sigma_old^-1 (mu - mu_old)
        KL_Sigma = 1/2 [ tr(Sigma^-1 Sigma_old) - d + log(|Sigma| / |Sigma_old|) ]

    KL_mu is the KL to N(mu, Sigma_old) (only the mean moved), KL_Sigma the KL to N(mu_old, Sigma) (only the
    covariance moved); each equals the full KL(N(mu_old, Sigma_old) || N(mu, Sigma)) when the other part is
    unchanged (the full KL's mean term weighs by Sigma^-1, not Sigma_old^-1). Inputs [..., d] (stds broadcast);
    returns (KL_mu, KL_Sigma) [...]."""
    mean_old, std_old, mean, std = jnp.broadcast_arrays(mean_old, std_old, mean, std)
    chex.assert_equal_shape([mean_old, std_old, mean, std])
    kl_mu = 0.5 * jnp.sum(jnp.square((mean - mean_old) / std_old), axis=-1)
    variance_ratio = jnp.square(std_old / std)
    kl_sigma = 0.5 * jnp.sum(variance_ratio - 1.0 - jnp.log(variance_ratio), axis=-1)
    return kl_mu, kl_sigma
