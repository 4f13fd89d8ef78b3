"""PyTorch + gymnasium PPO on CartPole-v1, CleanRL's `ppo.py` reduced to its loop, for `benchmarks.peers`; run with
the python of `benchmarks/.venv-torch`: `python benchmarks/peer_workers/torch_worker.py '<spec json>'` prints JSON.

The same PPO as the JAX workers' config (num_envs x num_steps, epochs x minibatches, GAE, clipped surrogate and
value loss, entropy bonus, global gradient-norm clipping, Adam eps 1e-5, constant learning rate), on
`gymnasium.vector.SyncVectorEnv` (Python CartPole, stepped one env at a time), `torch.set_num_threads(1)`
(the JAX programs use one core). Reports env steps/s of the whole training loop and the mean return of the
training episodes that ended in the last 10 iterations. No compile step; no evaluation curve.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import main  # noqa: E402


def run(spec: dict) -> dict:
    from importlib.metadata import version

    import gymnasium as gym
    import numpy as np
    import torch
    from torch import nn

    c = spec["config"]
    torch.set_num_threads(1)
    torch.manual_seed(spec.get("seed", 0))
    n, t = c["num_envs"], c["num_steps"]
    iterations = c["total_timesteps"] // (n * t)
    minibatch = n * t // c["minibatches"]
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.RecordEpisodeStatistics(gym.make(c["env"])) for _ in range(n)]
    )
    obs_dim, num_actions = envs.single_observation_space.shape[0], envs.single_action_space.n
    act = {"tanh": nn.Tanh, "relu": nn.ReLU}[c["activation"]]

    def mlp(out, std):
        layers, size = [], obs_dim
        for hidden in c["hidden"]:
            linear = nn.Linear(size, hidden)
            nn.init.orthogonal_(linear.weight, np.sqrt(2))
            nn.init.zeros_(linear.bias)
            layers += [linear, act()]
            size = hidden
        head = nn.Linear(size, out)
        nn.init.orthogonal_(head.weight, std)
        nn.init.zeros_(head.bias)
        return nn.Sequential(*layers, head)

    actor, critic = mlp(num_actions, 0.01), mlp(1, 1.0)
    params = list(actor.parameters()) + list(critic.parameters())
    optimizer = torch.optim.Adam(params, lr=c["learning_rate"], eps=1e-5)

    obs_buf = torch.zeros((t, n, obs_dim))
    act_buf = torch.zeros((t, n), dtype=torch.long)
    logp_buf, rew_buf, done_buf, val_buf = (torch.zeros((t, n)) for _ in range(4))
    returns_log = []  # (iteration, episode return)

    start = time.perf_counter()
    obs, _ = envs.reset(seed=spec.get("seed", 0))
    obs = torch.tensor(obs, dtype=torch.float32)
    done = torch.zeros(n)
    for iteration in range(iterations):
        for step in range(t):
            obs_buf[step], done_buf[step] = obs, done
            with torch.no_grad():
                dist = torch.distributions.Categorical(logits=actor(obs))
                action = dist.sample()
                logp_buf[step], val_buf[step] = dist.log_prob(action), critic(obs).squeeze(-1)
            act_buf[step] = action
            obs, reward, terminated, truncated, info = envs.step(action.numpy())
            rew_buf[step] = torch.tensor(reward, dtype=torch.float32)
            obs = torch.tensor(obs, dtype=torch.float32)
            done = torch.tensor(np.logical_or(terminated, truncated), dtype=torch.float32)
            if "episode" in info:
                ended = info["_episode"] if "_episode" in info else np.ones(n, bool)
                returns_log += [(iteration, float(r)) for r in np.asarray(info["episode"]["r"])[ended]]
        with torch.no_grad():  # GAE as CleanRL computes it (a truncation counts as a termination)
            next_value = critic(obs).squeeze(-1)
            advantages = torch.zeros((t, n))
            last = torch.zeros(n)
            for step in reversed(range(t)):
                nonterminal = 1.0 - (done if step == t - 1 else done_buf[step + 1])
                value_next = next_value if step == t - 1 else val_buf[step + 1]
                delta = rew_buf[step] + c["gamma"] * value_next * nonterminal - val_buf[step]
                last = delta + c["gamma"] * c["gae_lambda"] * nonterminal * last
                advantages[step] = last
            targets = advantages + val_buf
        b_obs, b_act, b_logp = obs_buf.reshape(-1, obs_dim), act_buf.reshape(-1), logp_buf.reshape(-1)
        b_adv, b_tgt, b_val = advantages.reshape(-1), targets.reshape(-1), val_buf.reshape(-1)
        for _ in range(c["epochs"]):
            order = torch.randperm(n * t)
            for first in range(0, n * t, minibatch):
                idx = order[first : first + minibatch]
                dist = torch.distributions.Categorical(logits=actor(b_obs[idx]))
                ratio = (dist.log_prob(b_act[idx]) - b_logp[idx]).exp()
                adv = (b_adv[idx] - b_adv[idx].mean()) / (b_adv[idx].std() + 1e-8)
                eps = c["clip_eps"]
                policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - eps, 1 + eps)).mean()
                value = critic(b_obs[idx]).squeeze(-1)
                clipped = b_val[idx] + (value - b_val[idx]).clamp(-eps, eps)
                value_loss = 0.5 * torch.max((value - b_tgt[idx]) ** 2, (clipped - b_tgt[idx]) ** 2).mean()
                loss = policy_loss + c["vf_coef"] * value_loss - c["ent_coef"] * dist.entropy().mean()
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(params, c["max_grad_norm"])
                optimizer.step()
    run_s = time.perf_counter() - start
    steps = iterations * n * t
    last10 = [r for i, r in returns_log if i >= iterations - 10]
    return {
        "library": "torch",
        "version": version("torch"),
        "gymnasium": version("gymnasium"),
        "algo": "ppo",
        "env_steps": steps,
        "compile_s": 0.0,
        "run_s": run_s,
        "steps_per_s": steps / run_s,
        "train_return_last10": float(np.mean(last10)) if last10 else None,
        "threads": torch.get_num_threads(),
    }


if __name__ == "__main__":
    main(run)
