"""The cases of `benchmarks.purejaxrl`, library-neutral and plain Python (importable in PureJaxRL's venv).

PPO is PureJaxRL's `ppo.py` CartPole config (4 envs x 128 steps, 4 epochs x 4 minibatches, 2 x 64 tanh actor and
critic, lr 2.5e-4 annealed, global-norm clipping 0.5); DQN its `dqn.py` CartPole config (10 envs, one update of
128 per 10 env steps, buffer 10k, 10k learning-start steps, target copy every 500 env steps, 120-84 relu Q-network,
lr 2.5e-4 without gradient clipping, epsilon 1 -> 0.05 over 2.5e5 steps).
"""

from __future__ import annotations

PPO = dict(
    num_envs=4,
    num_steps=128,
    total_timesteps=500_000,
    update_epochs=4,
    num_minibatches=4,
    learning_rate=2.5e-4,
    gamma=0.99,
    gae_lambda=0.95,
    clip_eps=0.2,
    ent_coef=0.01,
    vf_coef=0.5,
    max_grad_norm=0.5,
)
DQN = dict(
    num_envs=10,
    total_timesteps=500_000,
    buffer_size=10_000,
    batch_size=128,
    learning_starts=10_000,
    target_update_interval=500,  # env steps
    learning_rate=2.5e-4,
    gamma=0.99,
    epsilon_start=1.0,
    epsilon_end=0.05,
    epsilon_anneal_steps=250_000,
)

# name: (algo, overrides, seeds vmapped in one program, devices (jaxrl only; PureJaxRL has one))
CASES = {
    "ppo": ("ppo", {}, 1, 1),
    "ppo_2048_envs": ("ppo", {"num_envs": 2048, "total_timesteps": 2048 * 128 * 10}, 1, 1),
    "ppo_8_seeds": ("ppo", {}, 8, 1),
    "dqn": ("dqn", {}, 1, 1),
}


def case(name: str) -> tuple[str, dict, int, int]:
    """(algo, the config with the case's overrides, seeds, devices)."""
    algo, overrides, seeds, devices = CASES[name]
    return algo, {**(PPO if algo == "ppo" else DQN), **overrides}, seeds, devices
