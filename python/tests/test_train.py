"""A tiny training run (the NumPy masked PPO of examples/ppo_numpy.py) improves the policy,
and the result is compared with the heuristics by `lachesis.compare`."""

import importlib.util
import sys
from pathlib import Path

import numpy as np

import lachesis

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ppo_numpy.py"


def load_example():
    spec = importlib.util.spec_from_file_location("ppo_numpy", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_few_thousand_steps_of_ppo_improve_the_policy(trace):
    ppo = load_example()
    args = ppo.Args(trace=trace, total_timesteps=4096, window_jobs=40)
    before = ppo.evaluate(ppo.LinearAgent(), args, episodes=4, seed=1000)
    agent, _ = ppo.train(args, log=lambda *_: None)
    after = ppo.evaluate(agent, args, episodes=4, seed=1000)
    assert after > before, (before, after)
    c = lachesis.compare(
        [("ppo", agent.scorer()), "fifo/best-fit"], trace, "3x8:V100",
        windows=2, window_jobs=60, loads=[1.0], resamples=200,
    )
    assert set(c.runs.policy) == {"ppo", "fifo/best-fit"}
    assert np.isfinite(c.runs.avg_jct_s).all()
