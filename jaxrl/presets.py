"""Tuned Configs per (algorithm, environment): the configs found to work where an algorithm's defaults (tuned for
its default environment) do not, kept in the package so the CLI (`jaxrl train ALGO --env ENV --preset`), the
results suite and user code share one table.

`get("ppo", "Pendulum-v1")` is `ppo.Config(env="Pendulum-v1", **PRESETS["ppo", "Pendulum-v1"])`; keyword
arguments override single fields on top (`get("ppo", "Pendulum-v1", total_timesteps=2_000_000)`). A pair without
a preset gives the algorithm's defaults on that env. Each entry names where it comes from and what it measured.
"""

from __future__ import annotations

from typing import Any

from jaxrl.algos import ALGORITHMS

MINATAR = ("Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "Seaquest-MinAtar", "SpaceInvaders-MinAtar")

PRESETS: dict[tuple[str, str], dict[str, Any]] = {
    # twice PPO's default epochs (8 seeds x 5e5 steps: training -79.2, deterministic evaluation -76.0; the defaults
    # -81.9 and -78.8; gymnax-blines' shape of 16 envs x 32 steps at a constant lr 5e-4, 4 seeds: -82.4 / -80.6)
    ("ppo", "Acrobot-v1"): dict(update_epochs=8),
    # GRPO at the suite's CartPole budget (5e5 steps, its default) with a 20x lower rate: 8 seeds, training 485.8,
    # deterministic evaluation 500.0 on every seed; the default 0.01 gave 409.7 / 433.5 over 4 seeds (two seeds
    # stuck near 300), 1e-3 466.7 / 496.6
    ("grpo", "CartPole-v1"): dict(learning_rate=5e-4),
    # 4 seeds x 5e5 on Acrobot: lr 2e-3 training -96.4, evaluation -81.4; 5e-4 -95.1 / -85.2; the default 0.01 -152.1
    # (8 seeds, training)
    ("grpo", "Acrobot-v1"): dict(learning_rate=2e-3),
    # REINFORCE at 5e5 steps (its default budget is 3e5): 8 seeds, lr 2e-3 training 489.9, evaluation 496.6; the
    # default 3e-3 418.6 / 421.6 (two seeds stuck near 170)
    ("reinforce", "CartPole-v1"): dict(learning_rate=2e-3),
    # IMPALA at 5e5 steps, 8 seeds: two passes at half the rate, training 386.5, evaluation 439.8; the defaults
    # 302.5 / 358.2. Seeds still range 193-492: truncated importance weights bound each step's weight, not how far
    # the learner's policy moves from the behaviour's (4 epochs: three of 8 seeds collapsed to training returns of 9-17)
    ("impala", "CartPole-v1"): dict(update_epochs=2, learning_rate=5e-4),
    # DQN's defaults before 2026-12 (8 envs x 8 steps, 8 updates per iteration, 5e4 buffer, target copy every 5
    # iterations, double 3-step Huber targets, LayerNorm, lr 5e-4): on MountainCar at 2e5 steps, 8 seeds, training
    # -112.0, evaluation -99.9. The current defaults (PureJaxRL's CartPole shape, which holds on long CartPole runs)
    # -199.6 / -200.0 there: one update per 10 env steps and 1-step targets never carry the goal's value back.
    ("dqn", "MountainCar-v0"): dict(
        num_envs=8,
        num_steps=8,
        buffer_size=50_000,
        updates_per_iteration=8,
        learning_rate=5e-4,
        target_update_interval=5,
        double=True,
        n_step=3,
        td_loss="huber",
        layer_norm=True,
    ),
    # PQN and SARSA at 5e5 steps (their default budget is 2e5) exploring less once learned: epsilon to 0.01 in place
    # of 0.05. 8 seeds, training / evaluation: PQN 499.9 / 500.0 (the default 480.7 / 495.6), SARSA 499.6 / 499.7
    # (461.3 training). On Acrobot the same change left evaluation where it was (PQN -87.7, SARSA -88.1).
    **{(algo, "CartPole-v1"): dict(epsilon_end=0.01) for algo in ("pqn", "sarsa")},
    # DPO on Acrobot at a sixth of its default rate: 4 seeds x 5e5, lr 5e-4 training -98.2, evaluation -81.3; 1e-3
    # -91.0 / -84.1; the default 3e-3 -139.6 / -139.1 over 8 seeds (two seeds near -240)
    ("dpo", "Acrobot-v1"): dict(learning_rate=5e-4),
    # the README's Pendulum config (4 seeds x 1e6 steps: -193, -137, -158, -368)
    ("ppo", "Pendulum-v1"): dict(
        normalize_observations=True,
        num_envs=16,
        num_steps=128,
        update_epochs=10,
        num_minibatches=32,
        learning_rate=1e-3,
        gamma=0.95,
        gae_lambda=0.9,
        ent_coef=0.0,
    ),
    # benchmarks/spectrum_onpolicy.py's Pendulum config (3 seeds x 1.5e5 steps: -196, -286, -281)
    ("trpo", "Pendulum-v1"): dict(
        num_envs=8, num_steps=256, gamma=0.9, max_kl=0.02, vf_epochs=10, normalize_observations=True
    ),
    # rl-baselines3-zoo's MountainCar-v0 PPO: short windows, lambda 0.98, no entropy (4 seeds x 5e5: -111.9)
    ("ppo", "MountainCar-v0"): dict(
        normalize_observations=True,
        num_envs=16,
        num_steps=16,
        gae_lambda=0.98,
        ent_coef=0.0,
        update_epochs=4,
        num_minibatches=4,
        learning_rate=1e-3,
    ),
    ("ppo", "MountainCarContinuous-v0"): dict(normalize_observations=True),  # 4 seeds x 2e5: 92.7
    # many small updates: 8 envs x 8 steps, GAE(0.9), Adam (4 seeds x 5e5: -818; the defaults -1127); with the
    # rewards normalised 4 seeds x 1e6: -547, -235, -589, -214
    # bound_mean (2026-12-01): the seeds that failed had means of -9 to +20 against the box [-2, 2], a constant
    # clipped torque that no gradient pulls back (tests/test_networks.py); 4 seeds x 1e6 with it -333, -224, -291,
    # -231, without -547, -235, -589, -214
    ("a2c", "Pendulum-v1"): dict(
        bound_mean=True,
        normalize_rewards=True,
        normalize_observations=True,
        gamma=0.9,
        advantage="gae",
        gae_lambda=0.9,
        num_envs=8,
        num_steps=8,
        learning_rate=1e-3,
        optimizer="adam",
        normalize_advantages=True,
    ),
    # standardised V-trace advantages (the mean drift of truncated weights times an advantage offset: see
    # jaxrl.algos.impala), normalised observations and rewards, many small updates (4 seeds x 1e6: -658, -988,
    # -304, -738; the defaults -1603 over 8 seeds, below a random policy)
    # and bound_mean (the mean kept in the action box, as A2C's): 4 seeds x 1e6 training -257.4, evaluation
    # -230.9; without it -672.3 / -666.6
    ("impala", "Pendulum-v1"): dict(
        bound_mean=True,
        normalize_advantages=True,
        normalize_observations=True,
        normalize_rewards=True,
        gamma=0.9,
        num_envs=8,
        num_steps=8,
        num_minibatches=1,
        behaviour_lag=1,
        ent_coef=0.0,
        max_grad_norm=100.0,
    ),
    # normalised observations and rewards (4 seeds x 1e6: -181, -165, -914, -918; the defaults -1035 over 8 seeds)
    ("reinforce", "Pendulum-v1"): dict(normalize_observations=True, normalize_rewards=True),
    # PPO's Pendulum flags for V-MPO (8 seeds x 5e5 steps: -165.2 [-175.1, -157.8]; benchmarks/vmpo_results.py)
    ("vmpo", "Pendulum-v1"): dict(
        normalize_observations=True,
        num_steps=128,
        update_epochs=10,
        num_minibatches=32,
        learning_rate=1e-3,
        gamma=0.95,
        gae_lambda=0.9,
    ),
    # more gradient steps per group at a lower rate than the CartPole default (Pendulum 4 seeds x 5e5: -267)
    **{
        ("grpo", env): dict(learning_rate=1e-3, update_epochs=10, num_minibatches=32)
        for env in ("Pendulum-v1", "MountainCarContinuous-v0")
    },
    # recurrent PPO on bsuite's memory chain (memory length 5): 4 seeds x 4e4 steps, greedy eval 1.0 on each seed,
    # the same config with core="none" about 0 (tests/test_recurrent.py, README "Recurrent policies")
    ("ppo", "MemoryChain-bsuite"): dict(
        core="gru", core_size=64, num_envs=32, num_steps=24, num_minibatches=4, learning_rate=1e-3
    ),
    # PQN-RNN on the same task: 4 seeds x 4e4 steps (tests/test_recurrent.py); unscaled +-1 rewards
    ("pqn", "MemoryChain-bsuite"): dict(
        core="gru", core_size=64, num_envs=32, num_steps=24, num_minibatches=4, learning_rate=1e-3, reward_scale=1.0
    ),
    # recurrent IMPALA (V-trace, behaviour lag 2) on the same task: 4 seeds x 4e4 steps (tests/test_recurrent.py)
    ("impala", "MemoryChain-bsuite"): dict(
        core="gru", core_size=64, num_envs=32, num_steps=24, num_minibatches=4, update_epochs=2, learning_rate=1e-3
    ),
    # gymnax-blines' MinAtar PPO (agents/<game>/ppo.yaml, the same for every game): 64 envs x 128 steps, 4 epochs x 8
    # minibatches, gamma 0.999, 2 x 256 relu MLP on the flattened image, a constant lr 5e-4 (theirs warms up over the
    # first 5%), entropy 0.01, 1e7 steps. Breakout at 2e6, 2 seeds: 16.3 and 13.5, where gamma 0.99 with 2 x 64 tanh
    # and an annealed lr plateaued at 6.5.
    **{
        ("ppo", env): dict(
            num_envs=64,
            num_steps=128,
            learning_rate=5e-4,
            anneal_lr=False,
            update_epochs=4,
            num_minibatches=8,
            gamma=0.999,
            hidden_sizes=(256, 256),
            activation="relu",
        )
        for env in MINATAR
    },
    # purejaxql's MinAtar PQN (config/alg/pqn_minatar.yaml: 128 envs x 32 steps, 2 epochs x 32 minibatches, RAdam
    # 5e-4 annealed, lambda 0.65, epsilon to 0.05 over the first 10%, LayerNorm, unscaled rewards) with a 2 x 256 MLP
    # in place of its CNN, which runs about 20x slower than the MLP on this CPU (benchmarks/results/torsos.md).
    **{
        ("pqn", env): dict(
            num_envs=128,
            num_steps=32,
            update_epochs=2,
            num_minibatches=32,
            learning_rate=5e-4,
            q_lambda=0.65,
            epsilon_end=0.05,
            epsilon_decay_fraction=0.1,
            reward_scale=1.0,
            hidden_sizes=(256, 256),
        )
        for env in MINATAR
    },
}


def overrides(algo: str, env: str) -> dict[str, Any]:
    """The preset's field values for (algo, env); {} where there is none."""
    return dict(PRESETS.get((algo, env), {}))


def get(algo: str, env: str, **changes):
    """`ALGORITHMS[algo].Config` on `env` with the preset for (algo, env) applied, then `changes`."""
    if algo not in ALGORITHMS:
        raise ValueError(f"algo={algo!r} is not one of {', '.join(ALGORITHMS)}.")
    return ALGORITHMS[algo].Config(env=env, **{**overrides(algo, env), **changes})


def available() -> list[tuple[str, str]]:
    """Every (algorithm, env) pair with a preset."""
    return sorted(PRESETS)
