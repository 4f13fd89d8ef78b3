"""Return and advantage estimators for time-major rollouts.

All functions are pure and take time-major inputs ``[T, ...]`` (any trailing
batch dims, e.g. ``[T, N]``). Per step ``t`` of a rollout:

* ``r_t``: reward received after taking action ``a_t`` in ``s_t``.
* ``v_t``: V(s_t).
* ``next_v_t``: V(s_{t+1}) of the TRUE successor state (on an episode end this
  is the value of ``info["final_observation"]``, not of the auto-reset one).
* ``terminated_t``: s_{t+1} is terminal -> bootstrap with 0.
* ``truncated_t``: the episode was cut by a time limit after step t ->
  bootstrap from ``next_v_t``. If both flags are set, termination wins.

With ``done_t = terminated_t | truncated_t``, no recursion crosses an episode
boundary, and at the end of the window (t = T-1) every estimator bootstraps
from ``(1 - terminated_{T-1}) * next_v_{T-1}``.

``gamma`` and ``lambda_`` may be Python floats or traced JAX scalars (they can
be vmapped over); ``n`` of :func:`n_step_returns` is a static Python int. All
outputs are float32 with the shape of ``r_t``. No ``stop_gradient`` is applied.
"""

import chex
import jax
import jax.numpy as jnp

Array = chex.Array
Numeric = chex.Numeric


def _f32(x):
    return jnp.asarray(x, jnp.float32)


def _check(float_arrays, flag_arrays, scalars):
    """Rewards/values must be float; all [T, ...] of one shape; scalars rank 0."""
    chex.assert_axis_dimension_gt(float_arrays[0], 0, 0)  # time-major, T >= 1.
    chex.assert_equal_shape(float_arrays + flag_arrays)
    chex.assert_type(float_arrays, float)
    chex.assert_rank(scalars, 0)


def _episode_discounts(terminated_t, truncated_t, gamma):
    """Returns (discount_t, continue_t).

    discount_t = gamma * (1 - terminated_t) multiplies the bootstrap value;
    continue_t = 1 iff index t+1 is in the same episode and inside the window.
    """
    term, trunc = _f32(terminated_t), _f32(truncated_t)
    done = jnp.maximum(term, trunc)
    not_last = jnp.ones_like(done).at[-1].set(0.0)
    return _f32(gamma) * (1.0 - term), (1.0 - done) * not_last


def _backward_sum(x_t, c_t):
    """y_t = x_t + c_t * y_{t+1} with y_T = 0, via a reverse scan over axis 0."""

    def step(y_next, xc):
        x, c = xc
        y = x + c * y_next
        return y, y

    _, y_t = jax.lax.scan(step, jnp.zeros_like(x_t[0]), (x_t, c_t), reverse=True)
    return y_t


def _return_recursion_coeffs(r_t, next_v_t, discount_t, continue_t, lambda_):
    """G_t = r_t + d_t [(1-l_t) next_v_t + l_t G_{t+1}] == x_t + c_t G_{t+1}.

    Here d_t = gamma (1 - term_t) and l_t = lambda (1 - done_t) (0 at t = T-1).
    """
    lam_t = _f32(lambda_) * continue_t
    x_t = _f32(r_t) + discount_t * (1.0 - lam_t) * _f32(next_v_t)
    c_t = discount_t * lam_t
    return x_t, c_t


def td_targets(r_t: Array, next_v_t: Array, terminated_t: Array, gamma: Numeric) -> Array:
    """One-step TD(0) targets (Sutton & Barto 2018, Sec. 6.1).

      G_t = r_t + gamma * (1 - terminated_t) * next_v_t

    Args:
      r_t: rewards, [T, ...].
      next_v_t: V(s_{t+1}) of the true successor states, [T, ...].
      terminated_t: whether s_{t+1} is terminal (bool or float), [T, ...].
      gamma: discount factor, scalar (may be traced).

    Returns:
      float32 targets, [T, ...].
    """
    _check([r_t, next_v_t], [terminated_t], [gamma])
    return _f32(r_t) + _f32(gamma) * (1.0 - _f32(terminated_t)) * _f32(next_v_t)


def lambda_returns(
    r_t: Array, next_v_t: Array, terminated_t: Array, truncated_t: Array, gamma: Numeric, lambda_: Numeric
) -> Array:
    """TD(lambda) returns, recursive form (Sutton & Barto 2018, Sec. 12.1).

    Inside an episode:
      G_t = r_t + gamma (1 - term_t) [(1 - lambda) next_v_t + lambda G_{t+1}]
    and at an episode end (done_t) or the window end (t = T-1):
      G_t = r_t + gamma (1 - term_t) next_v_t.

    lambda = 0 gives :func:`td_targets`, lambda = 1 :func:`discounted_returns`.

    Args:
      r_t: rewards, [T, ...].
      next_v_t: V(s_{t+1}) of the true successor states, [T, ...].
      terminated_t: whether s_{t+1} is terminal, [T, ...].
      truncated_t: whether the episode was cut by a time limit after t, [T, ...].
      gamma: discount factor, scalar (may be traced).
      lambda_: mixing parameter, scalar (may be traced).

    Returns:
      float32 lambda returns, [T, ...].
    """
    _check([r_t, next_v_t], [terminated_t, truncated_t], [gamma, lambda_])
    discount_t, continue_t = _episode_discounts(terminated_t, truncated_t, gamma)
    x_t, c_t = _return_recursion_coeffs(r_t, next_v_t, discount_t, continue_t, lambda_)
    return _backward_sum(x_t, c_t)


def discounted_returns(r_t: Array, next_v_t: Array, terminated_t: Array, truncated_t: Array, gamma: Numeric) -> Array:
    """Monte Carlo returns with bootstrapping at cuts (Sutton & Barto, Sec. 3.3).

    Inside an episode G_t = r_t + gamma G_{t+1}; at an episode end (done_t) or
    the window end (t = T-1), G_t = r_t + gamma (1 - term_t) next_v_t.
    Passing next_v_t = 0 gives pure MC returns that are cut at truncation.
    Equals :func:`lambda_returns` with lambda = 1.

    Returns:
      float32 returns, [T, ...].
    """
    return lambda_returns(r_t, next_v_t, terminated_t, truncated_t, gamma, 1.0)


def n_step_returns(
    r_t: Array, next_v_t: Array, terminated_t: Array, truncated_t: Array, gamma: Numeric, n: int
) -> Array:
    """n-step bootstrapped returns (Sutton & Barto 2018, Sec. 7.1).

      G_t = sum_{k=0}^{m-1} gamma^k r_{t+k}
            + gamma^m (1 - term_{t+m-1}) next_v_{t+m-1},

    with m = min(n, steps until the episode's end inclusive, steps until the
    window's end). Computed like rlax: n-1 applications (a static Python loop
    over shifted arrays) of G_t <- r_t + gamma (1 - term_t) G_{t+1} inside an
    episode, starting from the TD(0) targets.

    Args:
      r_t, next_v_t, terminated_t, truncated_t, gamma: as in `lambda_returns`.
      n: static Python int >= 1.

    Returns:
      float32 n-step returns, [T, ...].
    """
    _check([r_t, next_v_t], [terminated_t, truncated_t], [gamma])
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a Python int >= 1, got {n!r}.")
    discount_t, continue_t = _episode_discounts(terminated_t, truncated_t, gamma)
    x_t, c_t = _return_recursion_coeffs(r_t, next_v_t, discount_t, continue_t, 1.0)
    g_t = _f32(r_t) + discount_t * _f32(next_v_t)  # 1-step returns.
    for _ in range(min(n, r_t.shape[0]) - 1):  # More than T-1 changes nothing.
        g_next = jnp.concatenate([g_t[1:], jnp.zeros_like(g_t[:1])])
        g_t = x_t + c_t * g_next
    return g_t


def gae(
    r_t: Array, v_t: Array, next_v_t: Array, terminated_t: Array, truncated_t: Array, gamma: Numeric, lambda_: Numeric
) -> tuple[Array, Array]:
    """Generalized advantage estimation (Schulman et al. 2016, "High-Dimensional
    Continuous Control Using Generalized Advantage Estimation", Eq. 16).

      delta_t = r_t + gamma (1 - term_t) next_v_t - v_t
      A_t     = delta_t + gamma lambda (1 - done_t) A_{t+1},   A_T = 0
      targets = A_t + v_t

    When next_v_t == v_{t+1} inside episodes, targets equal `lambda_returns`.

    Args:
      r_t: rewards, [T, ...].
      v_t: V(s_t), [T, ...].
      next_v_t: V(s_{t+1}) of the true successor states, [T, ...].
      terminated_t, truncated_t, gamma, lambda_: as in `lambda_returns`.

    Returns:
      (advantages, value targets), float32, each [T, ...].
    """
    _check([r_t, v_t, next_v_t], [terminated_t, truncated_t], [gamma, lambda_])
    discount_t, continue_t = _episode_discounts(terminated_t, truncated_t, gamma)
    v_t = _f32(v_t)
    delta_t = _f32(r_t) + discount_t * _f32(next_v_t) - v_t
    # discount_t * continue_t == gamma * (1 - done_t) (0 at the window end).
    adv_t = _backward_sum(delta_t, _f32(lambda_) * discount_t * continue_t)
    return adv_t, adv_t + v_t
