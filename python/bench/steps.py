"""Python environment steps per second beside the Rust environment's, on the same windows in
one run, one core, with a trivial agent (the first legal candidate, else wait: the rule
`lachesis bench env` calls first-legal), and the overhead per step that Python adds.

    python python/bench/steps.py [--window-jobs 256] [--windows 8] [--repeats 5]

Run from the repository root with the package installed (`pip install ./python`, a release
build). Prints medians over the repeats: the Rust `SchedEnv` alone, `SchedulingEnv.step`
called directly, and through `gymnasium.make` (with its default wrappers).
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium
import numpy as np

import lachesis
from lachesis import _core
from lachesis.gym import ENV_ID, SchedulingEnv, _config_json

WAIT = lachesis.WAIT_ACTION


def first_legal(mask: np.ndarray) -> int:
    """The first legal non-wait row, else wait (argmax finds the first True)."""
    head = mask[:WAIT]
    i = int(head.argmax())
    return i if head[i] else WAIT


def play(env, windows: int, seed: int) -> int:
    """One episode per window, episode i seeded `seed + i` as the Rust roll-out does."""
    steps = 0
    for i in range(windows):
        _, info = env.reset(i, seed + i)
        mask = info["action_mask"]
        while True:
            _, _, terminated, truncated, info = env.step(first_legal(mask))
            mask = info["action_mask"]
            steps += 1
            if terminated or truncated:
                break
    return steps


def play_gym(env, windows: int, seed: int) -> int:
    """The same episodes through a `gymnasium.make` environment (reset options pick them)."""
    steps = 0
    for i in range(windows):
        _, info = env.reset(seed=seed + i, options={"window": i})
        mask = info["action_mask"]
        while True:
            _, _, terminated, truncated, info = env.step(first_legal(mask))
            mask = info["action_mask"]
            steps += 1
            if terminated or truncated:
                break
    return steps


def timed(fn, repeats: int) -> "tuple[float, int]":
    rates, steps = [], 0
    for _ in range(repeats):
        started = time.perf_counter()
        steps = fn()
        rates.append(steps / (time.perf_counter() - started))
    return statistics.median(rates), steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", default="traces/itp/cluster10.csv")
    p.add_argument("--cluster", default="auto")
    p.add_argument("--window-jobs", type=int, default=256)
    p.add_argument("--windows", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    kw = dict(window_jobs=a.window_jobs, windows=a.windows, seed=a.seed, config=_config_json(None))
    raw = _core.Env(a.trace, a.cluster, **kw)
    rust_rates, rust_steps = _core.rust_steps_per_s(
        a.trace, a.cluster, repeats=a.repeats, **kw
    )
    rust = statistics.median(rust_rates)
    py, py_steps = timed(lambda: play(raw, a.windows, a.seed), a.repeats)
    assert py_steps == rust_steps, (py_steps, rust_steps)  # the same episodes, step for step
    env = gymnasium.make(
        ENV_ID, trace=a.trace, cluster=a.cluster, window_jobs=a.window_jobs,
        windows=a.windows, window_seed=a.seed,
    )
    wrapped, _ = timed(lambda: play_gym(env, a.windows, a.seed), a.repeats)
    sched = SchedulingEnv(a.trace, a.cluster, window_jobs=a.window_jobs, windows=a.windows,
                          window_seed=a.seed)
    direct, _ = timed(lambda: play_gym(sched, a.windows, a.seed), a.repeats)
    print(
        f"{a.trace} on {a.cluster}: {a.windows} episodes of {a.window_jobs}-job windows, "
        f"{rust_steps} steps per repeat, first-legal agent, one core, medians of {a.repeats}"
    )
    us = lambda rate: 1e6 / rate  # noqa: E731
    print(f"  Rust SchedEnv (no Python)          {rust:>9.0f} steps/s  {us(rust):6.2f} us/step")
    for name, rate in [
        ("_core.Env (the binding)", py),
        ("SchedulingEnv.step", direct),
        ("gymnasium.make(...).step", wrapped),
    ]:
        print(
            f"  {name:<34} {rate:>9.0f} steps/s  {us(rate):6.2f} us/step "
            f"(+{us(rate) - us(rust):.2f} us over Rust; {rate / 50_000:.2f}x the 50k target, "
            f"{rate / 2_900:.1f}x RLScheduler's 2.9k)"
        )


if __name__ == "__main__":
    main()
