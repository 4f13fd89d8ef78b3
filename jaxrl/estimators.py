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
* ``log_rho_t``: log pi(a_t|s_t) - log mu(a_t|s_t), the log importance ratio
  of the learner's policy pi to the behaviour policy mu, whose log-probs were
  stored at collection time (V-trace, Retrace).

With ``done_t = terminated_t | truncated_t``, no recursion crosses an episode
boundary, and at the end of the window (t = T-1) every estimator bootstraps
from ``(1 - terminated_{T-1}) * next_v_{T-1}``.

``gamma`` and ``lambda_`` may be Python floats or traced JAX scalars (they can
be vmapped over), and so may the clip levels of :func:`vtrace`; ``n`` of
:func:`n_step_returns` and ``group_size`` / ``mode`` of
:func:`group_relative_advantages` (which takes a validity mask instead of
episode flags) are static Python values. All outputs are float32 with the
shape of ``r_t``. No ``stop_gradient`` is applied.
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


def _next(x_t):
    """x_{t+1} along axis 0, padded with 0 at t = T-1."""
    return jnp.concatenate([x_t[1:], jnp.zeros_like(x_t[:1])])


def _return_recursion_coeffs(r_t, next_v_t, discount_t, lam_t, next_q_t=None):
    """G_t = r_t + d_t [next_v_t + l_t (G_{t+1} - next_q_t)] == x_t + c_t G_{t+1}.

    Here d_t = gamma (1 - term_t) and l_t is the per-step trace coefficient,
    already 0 at an episode end or at t = T-1. With next_q_t = next_v_t (the
    default) this is TD(lambda): G_t = r_t + d_t [(1-l_t) next_v_t + l_t G_{t+1}].
    With next_q_t = Q(s_{t+1}, a_{t+1}) and next_v_t = E_pi Q(s_{t+1}, .), it is
    the general off-policy return of Retrace / Q(lambda) / tree backup.
    """
    next_v_t = _f32(next_v_t)
    next_q_t = next_v_t if next_q_t is None else _f32(next_q_t)
    x_t = _f32(r_t) + discount_t * (next_v_t - lam_t * next_q_t)
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
    x_t, c_t = _return_recursion_coeffs(r_t, next_v_t, discount_t, _f32(lambda_) * continue_t)
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
    x_t, c_t = _return_recursion_coeffs(r_t, next_v_t, discount_t, continue_t)
    g_t = _f32(r_t) + discount_t * _f32(next_v_t)  # 1-step returns.
    for _ in range(min(n, r_t.shape[0]) - 1):  # More than T-1 changes nothing.
        g_t = x_t + c_t * _next(g_t)
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


# ---------------------------------------------------------------------------
# Group-relative advantages (GRPO).
# ---------------------------------------------------------------------------


def _masked_normalize(x, mask, axis, eps):
    """(x - mean) / (std + eps) over `axis` among the entries where `mask`.

    Population statistics (ddof = 0). Entries outside `mask` never affect the
    statistics and come out as exactly 0, as does every entry of a group whose
    valid values are all equal: the values are shifted by the group's minimum
    first, so identical values are exactly 0 before the mean is taken, and
    std == 0 is then exact. Gradients stay finite at std == 0.
    """
    count = jnp.sum(mask, axis=axis, keepdims=True, dtype=jnp.float32)
    any_valid = count > 0
    x_min = jnp.min(jnp.where(mask, x, jnp.inf), axis=axis, keepdims=True)
    shifted = jnp.where(mask, x - jnp.where(any_valid, x_min, 0.0), 0.0)
    safe_count = jnp.maximum(count, 1.0)
    centred = jnp.where(mask, shifted - jnp.sum(shifted, axis=axis, keepdims=True) / safe_count, 0.0)
    var = jnp.sum(centred**2, axis=axis, keepdims=True) / safe_count
    has_spread = var > 0
    # Both branches of jnp.where are differentiated: keep the unused one finite.
    denom = jnp.where(has_spread, jnp.sqrt(jnp.where(has_spread, var, 1.0)) + _f32(eps), 1.0)
    return jnp.where(mask & has_spread, centred / denom, 0.0)


def group_relative_advantages(
    r_t: Array, mask_t: Array, group_size: int, mode: str = "outcome", eps: Numeric = 1e-8
) -> Array:
    """Group-relative advantages of GRPO (Shao et al. 2024, "DeepSeekMath: Pushing
    the Limits of Mathematical Reasoning in Open Language Models", arXiv
    2402.03300, Sec. 4.1.2 outcome and 4.1.3 process supervision).

    Axis 1 of ``r_t`` holds N = M * group_size episodes: member n belongs to
    group n // group_size (a group's members are adjacent columns, as a grouped
    rollout that clones each start state group_size times lays them out). Any
    further trailing dims are independent. ``mask_t`` is True on the valid
    steps of each member's episode; masked steps are ignored completely (their
    rewards, even NaN, affect nothing) and get advantage 0.

    mode="outcome" (Sec. 4.1.2): with the undiscounted return
    R_i = sum_t mask_{t,i} r_{t,i} of each member,
      A_{t,i} = (R_i - mean_g(R)) / (std_g(R) + eps)   on every valid step t.
    mode="process" (Sec. 4.1.3): every valid step reward of the group's members
    is normalised by the mean and std of that pooled set,
      rn_{t,i} = (r_{t,i} - mean_g(r)) / (std_g(r) + eps),
      A_{t,i}  = sum_{t' >= t} mask_{t',i} rn_{t',i}   on valid steps.

    Statistics are population ones (ddof = 0). A group whose values are all
    equal gets advantage exactly 0 (never NaN). In outcome mode a member with
    no valid step takes no part in its group's statistics.

    Args:
      r_t: rewards, float [T, N, ...].
      mask_t: valid steps (bool, or 0/1 numbers), [T, N, ...].
      group_size: static Python int >= 1 that divides N.
      mode: static, "outcome" or "process".
      eps: added to the std, scalar (may be traced).

    Returns:
      float32 advantages, [T, N, ...].
    """
    _check([r_t], [mask_t], [eps])
    if jnp.ndim(r_t) < 2:
        raise ValueError(f"r_t must be [T, N, ...] with the group members on axis 1, got shape {r_t.shape}.")
    if mode not in ("outcome", "process"):
        raise ValueError(f"mode must be 'outcome' or 'process', got {mode!r}.")
    num = r_t.shape[1]
    if not isinstance(group_size, int) or group_size < 1 or num % group_size:
        raise ValueError(
            f"group_size must be a Python int >= 1 that divides N = r_t.shape[1] = {num}, got {group_size!r}."
        )
    mask_t = jnp.asarray(mask_t).astype(bool)
    r_t = jnp.where(mask_t, _f32(r_t), 0.0)
    t_len, rest = r_t.shape[0], r_t.shape[2:]
    grouped = (num // group_size, group_size) + rest  # [M, G, ...]
    if mode == "outcome":
        member_valid = jnp.any(mask_t, axis=0).reshape(grouped)
        returns = jnp.sum(r_t, axis=0).reshape(grouped)
        adv = _masked_normalize(returns, member_valid, axis=1, eps=eps).reshape((num,) + rest)
        return jnp.where(mask_t, adv[None], 0.0)
    rn_t = _masked_normalize(
        r_t.reshape((t_len,) + grouped), mask_t.reshape((t_len,) + grouped), axis=(0, 2), eps=eps
    ).reshape(r_t.shape)
    return jnp.where(mask_t, _backward_sum(rn_t, jnp.ones_like(rn_t)), 0.0)


# ---------------------------------------------------------------------------
# Off-policy corrections from stored behaviour log-probabilities.
# ---------------------------------------------------------------------------


def _clipped_ratio(log_rho_t, clip):
    """min(clip, exp(log_rho_t)); no clipping when clip is None."""
    rho_t = jnp.exp(_f32(log_rho_t))
    return rho_t if clip is None else jnp.minimum(_f32(clip), rho_t)


def vtrace(
    v_t: Array,
    next_v_t: Array,
    r_t: Array,
    terminated_t: Array,
    truncated_t: Array,
    log_rho_t: Array,
    gamma: Numeric,
    lambda_: Numeric = 1.0,
    clip_rho: Numeric | None = 1.0,
    clip_c: Numeric | None = 1.0,
    clip_pg_rho: Numeric | None = 1.0,
) -> tuple[Array, Array]:
    """V-trace value targets and policy-gradient advantages (Espeholt et al.
    2018, "IMPALA: Scalable Distributed Deep-RL with Importance Weighted
    Actor-Learner Architectures", arXiv 1802.01561, Eq. 1 and Remark 1).

    With rho_t = min(clip_rho, pi(a_t|s_t) / mu(a_t|s_t)) and
    c_t = lambda min(clip_c, pi(a_t|s_t) / mu(a_t|s_t)):

      delta_t     = rho_t (r_t + gamma (1 - term_t) next_v_t - v_t)
      vs_t - v_t  = delta_t + gamma (1 - done_t) c_t (vs_{t+1} - v_{t+1}),
                    no carry at t = T-1,
      pg_adv_t    = min(clip_pg_rho, pi/mu) (r_t + gamma (1 - term_t) vs'_{t+1} - v_t),

    where vs'_{t+1} = vs_{t+1} if t+1 is in the same episode and window, else
    next_v_t (the value of the true successor: of the final observation at a
    truncation). Unrolled (Eq. 1), vs_t = v_t + sum_{k=t}^{t+m-1}
    gamma^{k-t} (prod_{i=t}^{k-1} c_i) delta_k, m the steps to the episode's or
    window's end. With log_rho = 0 and clip_rho, clip_c >= 1, vs_t equals the
    targets of :func:`gae` (lambda_returns when next_v_t == v_{t+1}).

    Unlike rlax, which bootstraps pg advantages from
    lambda vs_{t+1} + (1 - lambda) v_{t+1}, pg_adv uses vs_{t+1} as in the
    paper; the two agree at lambda = 1.

    Args:
      v_t: V(s_t) under the current parameters, [T, ...].
      next_v_t: V(s_{t+1}) of the true successor states, [T, ...].
      r_t: rewards, [T, ...].
      terminated_t, truncated_t: as in :func:`lambda_returns`, [T, ...].
      log_rho_t: log pi(a_t|s_t) - log mu(a_t|s_t), with mu the behaviour
        log-probabilities stored at collection time, [T, ...].
      gamma: discount factor, scalar (may be traced).
      lambda_: trace coefficient, scalar (may be traced).
      clip_rho, clip_c, clip_pg_rho: truncation levels rho-bar, c-bar and the
        policy-gradient rho-bar; scalars (may be traced) or None for none.

    Returns:
      (vs_t, pg_advantages_t): value targets and policy-gradient advantages,
      float32, each [T, ...].
    """
    clips = [c for c in (clip_rho, clip_c, clip_pg_rho) if c is not None]
    _check([v_t, next_v_t, r_t, log_rho_t], [terminated_t, truncated_t], [gamma, lambda_] + clips)
    discount_t, continue_t = _episode_discounts(terminated_t, truncated_t, gamma)
    v_t, next_v_t = _f32(v_t), _f32(next_v_t)
    delta_t = _clipped_ratio(log_rho_t, clip_rho) * (_f32(r_t) + discount_t * next_v_t - v_t)
    c_t = _f32(lambda_) * _clipped_ratio(log_rho_t, clip_c)
    # discount_t * continue_t == gamma * (1 - done_t) (0 at the window end).
    vs_t = v_t + _backward_sum(delta_t, discount_t * continue_t * c_t)
    vs_next_t = jnp.where(continue_t > 0, _next(vs_t), next_v_t)
    pg_adv_t = _clipped_ratio(log_rho_t, clip_pg_rho) * (_f32(r_t) + discount_t * vs_next_t - v_t)
    return vs_t, pg_adv_t


def retrace(
    q_t: Array,
    next_expected_q_t: Array,
    r_t: Array,
    terminated_t: Array,
    truncated_t: Array,
    log_rho_t: Array,
    gamma: Numeric,
    lambda_: Numeric = 1.0,
) -> Array:
    """Retrace(lambda) targets for Q(s_t, a_t) (Munos et al. 2016, "Safe and
    Efficient Off-Policy Reinforcement Learning", arXiv 1606.02647, Eq. 4).

    With c_t = lambda min(1, pi(a_t|s_t) / mu(a_t|s_t)):

      G_t = r_t + gamma (1 - term_t) [E_pi Q(s_{t+1}, .)
                                      + c_{t+1} (G_{t+1} - Q(s_{t+1}, a_{t+1}))]

    inside an episode, and G_t = r_t + gamma (1 - term_t) E_pi Q(s_{t+1}, .)
    at an episode end (done_t; at a truncation E_pi Q is that of the final
    observation) or at t = T-1. Unrolled, G_t = q_t + sum_{k=t}^{t+m-1}
    gamma^{k-t} (prod_{i=t+1}^{k} c_i) (r_k + gamma (1 - term_k)
    E_pi Q(s_{k+1}, .) - q_k), m the steps to the episode's or window's end.

    Special cases: lambda = 0 (or pi(a_{t+1}) = 0) gives expected-SARSA TD(0)
    targets, :func:`td_targets` with next_v_t = next_expected_q_t. On-policy
    (log_rho = 0) with next_expected_q_t == q_{t+1} inside episodes (e.g. a
    greedy pi whose action was taken) it is :func:`lambda_returns` with
    next_v_t = next_expected_q_t, and :func:`discounted_returns` at lambda = 1.

    Args:
      q_t: Q(s_t, a_t) of the actions taken, [T, ...]. Only q_{t+1} inside an
        episode is read (q_0 and the step after an episode end are not).
      next_expected_q_t: E_{a ~ pi} Q(s_{t+1}, a) of the true successor state
        (of the final observation at a truncation; ignored at termination),
        [T, ...]. Use max_a Q for a greedy pi.
      r_t: rewards, [T, ...].
      terminated_t, truncated_t: as in :func:`lambda_returns`, [T, ...].
      log_rho_t: log pi(a_t|s_t) - log mu(a_t|s_t) at step t, mu the stored
        behaviour log-probabilities, [T, ...]. The target at t uses
        log_rho_{t+1} (the trace c_{t+1}); log_rho_0 is never read.
      gamma: discount factor, scalar (may be traced).
      lambda_: trace coefficient, scalar (may be traced).

    Returns:
      float32 targets G_t for Q(s_t, a_t), [T, ...]. The TD error is G_t - q_t.
    """
    _check([q_t, next_expected_q_t, r_t, log_rho_t], [terminated_t, truncated_t], [gamma, lambda_])
    discount_t, continue_t = _episode_discounts(terminated_t, truncated_t, gamma)
    c_t = _f32(lambda_) * _clipped_ratio(log_rho_t, 1.0)
    x_t, k_t = _return_recursion_coeffs(
        r_t, next_expected_q_t, discount_t, continue_t * _next(c_t), next_q_t=_next(_f32(q_t))
    )
    return _backward_sum(x_t, k_t)


# ---------------------------------------------------------------------------
# Preference pairs from grouped returns (DPO for control).
# ---------------------------------------------------------------------------

PAIR_MODES = ("best_worst", "all")


def preference_pairs(
    returns: Array, group_size: int, mode: str = "best_worst", margin: Numeric = 0.0
) -> tuple[Array, Array, Array]:
    """Preference pairs (y_w, y_l) among the members of each group, ranked by
    their returns, for Direct Preference Optimization (Rafailov et al. 2023,
    "Direct Preference Optimization: Your Language Model is Secretly a Reward
    Model", arXiv 2305.18290) on grouped rollouts: x is a group's shared start,
    y a member's trajectory, and the preference y_w > y_l holds when

      R_w - R_l > margin,

    R the members' returns. No learned reward model is needed.

    ``returns`` [N] holds N = M * group_size members, member n in group
    n // group_size (adjacent members share a start, as a grouped rollout lays
    them out). Pairs never cross groups.

    mode="best_worst": one pair per group, (argmax_g R, argmin_g R) (the first
    member on ties of the best or worst); P = M.
    mode="all": every pair of distinct members {i, j} of a group, ordered so the
    winner has the higher return (every ordered pair with R_w - R_l > margin
    is one of them); P = M * G (G - 1) / 2, in group order, then i < j.

    A pair whose gap is <= margin (ties in particular: margin >= 0) is not
    valid. Its indices still name two members of its group.

    Args:
      returns: float [N], one return per member.
      group_size: static Python int >= 2 that divides N.
      mode: static, "best_worst" or "all".
      margin: scalar (may be traced).

    Returns:
      (winners [P] int32, losers [P] int32, valid [P] bool); winners and losers
      are member indices into ``returns``.
    """
    chex.assert_rank(returns, 1)
    chex.assert_type(returns, float)
    chex.assert_rank(margin, 0)
    if mode not in PAIR_MODES:
        raise ValueError(f"mode must be one of {PAIR_MODES}, got {mode!r}.")
    num = returns.shape[0]
    if not isinstance(group_size, int) or group_size < 2 or num % group_size:
        raise ValueError(f"group_size must be a Python int >= 2 that divides N = {num}, got {group_size!r}.")
    grouped = _f32(returns).reshape(num // group_size, group_size)  # [M, G]
    first = (jnp.arange(num // group_size, dtype=jnp.int32) * group_size)[:, None]  # [M, 1]
    if mode == "best_worst":
        best = jnp.argmax(grouped, axis=1).astype(jnp.int32)[:, None]
        worst = jnp.argmin(grouped, axis=1).astype(jnp.int32)[:, None]
    else:
        i, j = (x.astype(jnp.int32) for x in jnp.triu_indices(group_size, 1))
        i_wins = grouped[:, i] >= grouped[:, j]  # [M, G (G - 1) / 2]
        best, worst = jnp.where(i_wins, i, j), jnp.where(i_wins, j, i)
    winners, losers = (first + best).reshape(-1), (first + worst).reshape(-1)
    gap = _f32(returns)[winners] - _f32(returns)[losers]
    return winners, losers, gap > _f32(margin)
