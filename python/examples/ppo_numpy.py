"""Masked PPO on the Lachesis Gymnasium environment, in one readable NumPy file (CleanRL's
shape: a config with a line per field, sizes derived once, preallocated rollout storage),
then the trained policy against the heuristic library with `lachesis.compare` on identical
units. No deep-learning framework: the policy scores each candidate row linearly (a masked
softmax over the legal rows), the value is linear in the global features.

    python python/examples/ppo_numpy.py --total-timesteps 20000

(run from the repository root; `--help` lists the knobs). For a neural policy from a
maintained library, see ppo_maskable.py (sb3-contrib's MaskablePPO).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

import lachesis
from lachesis.gym import SchedulingVectorEnv


@dataclass
class Args:
    trace: str = "traces/itp/cluster10.csv"
    """the trace whose windows are the episodes"""
    cluster: str = "3x8:V100"
    """the cluster (preset, shape or file)"""
    window_jobs: int = 60
    """jobs per episode window"""
    load: float = 1.0
    """offered load every window is scaled to"""
    seed: int = 1
    """seed of windows, episodes, sampling and initialisation"""
    total_timesteps: int = 4096
    """environment steps of training, all environments together"""
    num_envs: int = 4
    """parallel environments (the Rust VecEnv)"""
    num_steps: int = 128
    """steps per environment per rollout"""
    learning_rate: float = 0.02
    """Adam's step size"""
    gamma: float = 0.99
    """discount"""
    gae_lambda: float = 0.95
    """GAE's lambda"""
    update_epochs: int = 4
    """passes over each rollout"""
    num_minibatches: int = 4
    """minibatches per pass"""
    clip_coef: float = 0.2
    """PPO's ratio clip"""
    ent_coef: float = 0.01
    """entropy bonus"""
    vf_coef: float = 0.5
    """value loss weight"""


def masked_softmax(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    z = np.where(mask, logits, -np.inf)
    z = z - z.max(axis=-1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=-1, keepdims=True)


class Adam:
    def __init__(self, size: int, lr: float):
        self.m, self.v, self.t, self.lr = np.zeros(size), np.zeros(size), 0, lr

    def step(self, params: np.ndarray, grad: np.ndarray) -> None:
        self.t += 1
        self.m = 0.9 * self.m + 0.1 * grad
        self.v = 0.999 * self.v + 0.001 * grad**2
        m_hat, v_hat = self.m / (1 - 0.9**self.t), self.v / (1 - 0.999**self.t)
        params -= self.lr * m_hat / (np.sqrt(v_hat) + 1e-5)


class LinearAgent:
    """Policy: logit(row) = row . w; value: global . u + c."""

    def __init__(self):
        self.width = len(lachesis.CANDIDATE_FEATURES)
        self.glob = len(lachesis.GLOBAL_FEATURES)
        self.params = np.zeros(self.width + self.glob + 1)

    @property
    def w(self):
        return self.params[: self.width]

    def value(self, glob: np.ndarray) -> np.ndarray:
        return glob @ self.params[self.width : self.width + self.glob] + self.params[-1]

    def probs(self, cand: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return masked_softmax(cand @ self.w, mask)

    def scorer(self):
        """The greedy policy as a `lachesis.compare` scorer."""
        w = self.w.copy()
        return lambda obs, mask: obs["candidates"].astype(np.float64) @ w


def train(args: Args, log=print) -> "tuple[LinearAgent, list[float]]":
    """Trains; returns the agent and the mean return of the episodes each rollout ended."""
    rng = np.random.default_rng(args.seed)
    envs = SchedulingVectorEnv(
        args.num_envs, args.trace, args.cluster, window_jobs=args.window_jobs,
        load=args.load, window_seed=args.seed,
    )
    agent = LinearAgent()
    optim = Adam(agent.params.size, args.learning_rate)
    n, t_len = args.num_envs, args.num_steps
    batch = n * t_len
    rows, width = lachesis.MAX_CANDIDATES, agent.width
    cand = np.zeros((t_len, n, rows, width), np.float32)
    glob = np.zeros((t_len, n, agent.glob), np.float32)
    masks = np.zeros((t_len, n, rows), bool)
    actions = np.zeros((t_len, n), np.int64)
    logps = np.zeros((t_len, n))
    rewards = np.zeros((t_len, n))
    dones = np.zeros((t_len, n))
    values = np.zeros((t_len, n))
    obs, infos = envs.reset(seed=args.seed)
    mask = infos["action_mask"]
    episode_return, returns_per_update = np.zeros(n), []
    reward_scale = None
    started = time.time()
    for update in range(max(1, args.total_timesteps // batch)):
        finished = []
        for t in range(t_len):
            cand[t], glob[t], masks[t] = obs["candidates"], obs["global"], mask
            p = agent.probs(obs["candidates"], mask)
            a = np.array([rng.choice(rows, p=pi) for pi in p])
            actions[t], logps[t] = a, np.log(p[np.arange(n), a])
            values[t] = agent.value(obs["global"])
            obs, r, term, trunc, infos = envs.step(a)
            mask = infos["action_mask"]
            episode_return += r
            if reward_scale is None:
                reward_scale = 1.0 / max(np.abs(r).max(), 1e-6)
            r = r * reward_scale
            if trunc.any():  # bootstrap a cut-short episode from its last observation
                for i in np.flatnonzero(trunc):
                    r[i] += args.gamma * agent.value(infos["final_obs"][i]["global"])
            rewards[t], dones[t] = r, term | trunc
            for i in np.flatnonzero(term | trunc):
                finished.append(episode_return[i])
                episode_return[i] = 0.0
        next_value = agent.value(obs["global"])
        adv = np.zeros((t_len, n))
        last = 0.0
        for t in reversed(range(t_len)):
            nv = next_value if t == t_len - 1 else values[t + 1]
            nonterminal = 1.0 - dones[t]
            delta = rewards[t] + args.gamma * nv * nonterminal - values[t]
            last = delta + args.gamma * args.gae_lambda * nonterminal * last
            adv[t] = last
        ret = adv + values
        flat = lambda x: x.reshape(batch, *x.shape[2:])  # noqa: E731
        b_cand, b_glob, b_mask = flat(cand), flat(glob), flat(masks)
        b_act, b_logp, b_adv, b_ret = flat(actions), flat(logps), flat(adv), flat(ret)
        mb = batch // args.num_minibatches
        for _ in range(args.update_epochs):
            order = rng.permutation(batch)
            for start in range(0, batch, mb):
                idx = order[start : start + mb]
                x, m, a = b_cand[idx].astype(np.float64), b_mask[idx], b_act[idx]
                p = agent.probs(x, m)
                k = np.arange(len(idx))
                ratio = np.exp(np.log(p[k, a]) - b_logp[idx])
                A = b_adv[idx]
                A = (A - A.mean()) / (A.std() + 1e-8)
                # d log pi(a) / dw = x_a - E_pi[x]; the clipped surrogate's gradient is zero
                # where the ratio left the clip range in the advantage's direction.
                mean_x = np.einsum("br,brf->bf", p, np.where(m[..., None], x, 0.0))
                dlogp = x[k, a] - mean_x
                live = ~(((A > 0) & (ratio > 1 + args.clip_coef)) | ((A < 0) & (ratio < 1 - args.clip_coef)))
                g_pi = -((A * ratio * live)[:, None] * dlogp).mean(axis=0)
                # Entropy bonus: dH/dw = -E_pi[(log p - E log p)(x - E x)].
                logp_all = np.log(np.where(m, p, 1.0))
                h_centered = np.where(m, logp_all - (p * logp_all).sum(-1, keepdims=True), 0.0)
                dH = -np.einsum("br,brf->bf", p * h_centered, x - mean_x[:, None, :]).mean(axis=0)
                v = agent.value(b_glob[idx])
                dv = (v - b_ret[idx]) / len(idx)
                g_v = np.concatenate([b_glob[idx].T @ dv, [dv.sum()]])
                grad = np.zeros_like(agent.params)
                grad[: agent.width] = g_pi - args.ent_coef * dH
                grad[agent.width :] = args.vf_coef * g_v
                optim.step(agent.params, grad)
        if finished:
            returns_per_update.append(float(np.mean(finished)))
        log(
            f"update {update}: {(update + 1) * batch} steps, "
            f"episodic return {np.mean(finished) if finished else float('nan'):.1f}, "
            f"{(update + 1) * batch / (time.time() - started):.0f} steps/s"
        )
    return agent, returns_per_update


def evaluate(agent: LinearAgent, args: Args, episodes: int, seed: int) -> float:
    """Mean return of the sampled policy over `episodes` seeded episodes."""
    env = lachesis.gym.SchedulingEnv(
        args.trace, args.cluster, window_jobs=args.window_jobs, load=args.load,
        window_seed=args.seed,
    )
    rng = np.random.default_rng(seed)
    total = 0.0
    for e in range(episodes):
        obs, info = env.reset(seed=seed + e)
        done = False
        while not done:
            p = agent.probs(obs["candidates"], info["action_mask"])
            obs, r, term, trunc, info = env.step(int(rng.choice(len(p), p=p)))
            total += r
            done = term or trunc
    return total / episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in vars(Args()).items():
        parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    args = Args(**vars(parser.parse_args()))
    before = evaluate(LinearAgent(), args, episodes=4, seed=1000)
    agent, _ = train(args)
    after = evaluate(agent, args, episodes=4, seed=1000)
    print(f"mean return of the sampled policy on 4 held-out episodes: {before:.1f} -> {after:.1f}")
    result = lachesis.compare(
        [("ppo-numpy", agent.scorer()), "tiresias/best-fit/las-preempt", "sjf/best-fit",
         "fifo/best-fit"],
        args.trace, args.cluster, windows=6, window_jobs=150,
    )
    print(result)


if __name__ == "__main__":
    main()
