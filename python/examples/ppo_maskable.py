"""Masked PPO from a maintained library (sb3-contrib's MaskablePPO, on PyTorch) on the
Lachesis environment, then the trained model against the heuristic library with
`lachesis.compare` on identical units, in one script.

    pip install ./python "sb3-contrib>=2.3"
    python python/examples/ppo_maskable.py --timesteps 5000

(run from the repository root). MaskablePPO reads the legal actions from the environment's
`action_masks()`; the compare runs the trained network greedily as a scorer: one logit per
candidate row, the best legal one taken, exactly as in the environment.
"""

from __future__ import annotations

import argparse

import gymnasium
import numpy as np

import lachesis
from lachesis.gym import ENV_ID


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", default="traces/itp/cluster10.csv")
    p.add_argument("--cluster", default="3x8:V100")
    p.add_argument("--timesteps", type=int, default=5000)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    try:
        import torch
        from sb3_contrib import MaskablePPO
    except ImportError as e:  # the NumPy example needs neither
        raise SystemExit(f"{e}: pip install 'sb3-contrib>=2.3' (or run ppo_numpy.py)")

    env = gymnasium.make(ENV_ID, trace=a.trace, cluster=a.cluster, window_jobs=60, load=1.0)
    model = MaskablePPO("MultiInputPolicy", env, n_steps=512, batch_size=128, seed=a.seed,
                        verbose=1)
    model.learn(total_timesteps=a.timesteps)

    def maskable_ppo(obs, mask):
        batch = {k: torch.as_tensor(v[None]) for k, v in obs.items()}
        with torch.no_grad():
            features = model.policy.extract_features(batch, model.policy.pi_features_extractor)
            latent = model.policy.mlp_extractor.forward_actor(features)
            logits = model.policy.action_net(latent)
        return logits[0].numpy().astype(np.float32)

    result = lachesis.compare(
        [maskable_ppo, "tiresias/best-fit/las-preempt", "sjf/best-fit", "fifo/best-fit"],
        a.trace, a.cluster, windows=6, window_jobs=150, threads=1,
    )
    print(result)
    print(result.paired[result.paired.metric == "avg_jct_s"].to_string(index=False))


if __name__ == "__main__":
    main()
