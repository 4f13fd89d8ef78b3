"""Independent one-step TD errors: the reference implementations DQN's and SARSA's tests compare the algorithms
against (themselves checked against NumPy and rlax in test_value_losses.py).

Per element over any leading batch shape `[...]`; action values `q_t` carry a trailing action axis `[..., A]`.
`terminated_t` (s_t is terminal) zeroes the bootstrap; a truncated transition bootstraps as usual, which is right
when `q_t` was computed on the true final observation (`Trajectory.next_obs`). Each returns the TD error
`target - q_tm1_a` with the target under `stop_gradient` (as rlax does by default), so minimising `huber(td)` or
`l2(td)` moves only Q(s_tm1, a_tm1). `gamma` is a scalar (may be traced).
"""

import chex
import jax
import jax.numpy as jnp

from jaxrl import losses


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
    v_t = losses.action_value(q_t_target, jnp.argmax(q_t_online, axis=-1))
    return _td_error(q_tm1_a, r_t, terminated_t, v_t, gamma)


def sarsa_td(
    q_tm1_a: jax.Array, r_t: jax.Array, terminated_t: jax.Array, q_t: jax.Array, a_t: jax.Array, gamma
) -> jax.Array:
    """SARSA TD error (Rummery & Niranjan 1994; Sutton & Barto 2018, Sec. 6.4), bootstrapping on the action
    a_t actually taken in s_t:

        delta = r_t + gamma (1 - terminated_t) q_t[a_t] - q_tm1_a
    """
    _check_td(q_tm1_a, r_t, terminated_t, gamma, [q_t], [a_t])
    return _td_error(q_tm1_a, r_t, terminated_t, losses.action_value(q_t, a_t), gamma)


def expected_sarsa_td(
    q_tm1_a: jax.Array, r_t: jax.Array, terminated_t: jax.Array, q_t: jax.Array, probs_t: jax.Array, gamma
) -> jax.Array:
    """Expected SARSA TD error (van Seijen, van Hasselt, Whiteson & Wiering 2009, "A Theoretical and Empirical
    Analysis of Expected Sarsa"), bootstrapping on the expectation under the policy's probabilities in s_t:

        delta = r_t + gamma (1 - terminated_t) sum_a probs_t[a] q_t[a] - q_tm1_a
    """
    _check_td(q_tm1_a, r_t, terminated_t, gamma, [q_t, probs_t])
    return _td_error(q_tm1_a, r_t, terminated_t, (probs_t * q_t).sum(-1), gamma)
