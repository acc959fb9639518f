"""Python environment steps per second beside the Rust environment's, on the same windows in
one run, one core, with a trivial agent (the first legal candidate, else wait: the rule
`lachesis bench env` calls first-legal), and the overhead per step that Python adds.

    python python/bench/steps.py [--window-jobs 256] [--windows 16] [--repeats 7]

Run from the repository root with the package installed (`pip install ./python`, a release
build). Each repeat runs the Rust `SchedEnv` alone, then the same episodes through the
binding `_core.Env`, `SchedulingEnv.step` and `gymnasium.make` (with its default wrappers), so
that on a loaded machine the ratio to Rust and the overhead per step (each against the Rust
rate of its own repeat) hold better than the absolute rates. Prints medians over the repeats.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import timeit

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


def episodes(env, windows: int, seed: int, reset) -> int:
    """One episode per window, episode i seeded `seed + i` (`reset(env, i, seed + i)` starts
    it) and played by `first_legal`: the steps taken."""
    steps = 0
    for i in range(windows):
        _, info = reset(env, i, seed + i)
        mask = info["action_mask"]
        while True:
            _, _, terminated, truncated, info = env.step(first_legal(mask))
            mask = info["action_mask"]
            steps += 1
            if terminated or truncated:
                break
    return steps


def reset_raw(env, window: int, seed: int):
    """`_core.Env`: the window and the simulation seed as the Rust roll-out gives them."""
    return env.reset(window, seed)


def reset_gym(env, window: int, seed: int):
    """A Gymnasium environment: the window by the reset options (the simulation seed is drawn
    from `seed`, so episodes may differ from the Rust ones in their randomness, not length)."""
    return env.reset(seed=seed, options={"window": window})


def rate(fn) -> "tuple[float, int]":
    started = time.perf_counter()
    steps = fn()
    return steps / (time.perf_counter() - started), steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", default="traces/itp/cluster10.csv")
    p.add_argument("--cluster", default="auto")
    p.add_argument("--window-jobs", type=int, default=256)
    p.add_argument("--windows", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeats", type=int, default=7)
    a = p.parse_args()
    setting = _core.Setting(
        a.trace, a.cluster, window_jobs=a.window_jobs, windows=a.windows, seed=a.seed,
        config=_config_json(None),
    )
    raw = _core.Env(setting)
    sched = SchedulingEnv(a.trace, a.cluster, window_jobs=a.window_jobs, windows=a.windows,
                          window_seed=a.seed)
    made = gymnasium.make(
        ENV_ID, trace=a.trace, cluster=a.cluster, window_jobs=a.window_jobs,
        windows=a.windows, window_seed=a.seed,
    )
    runs = {
        "_core.Env (the binding)": lambda: episodes(raw, a.windows, a.seed, reset_raw),
        "SchedulingEnv.step": lambda: episodes(sched, a.windows, a.seed, reset_gym),
        "gymnasium.make(...).step": lambda: episodes(made, a.windows, a.seed, reset_gym),
    }
    for fn in runs.values():  # warm-up: caches, NumPy's and Gymnasium's first calls
        fn()
    # Side by side: in every repeat the Rust environment alone, then each Python way in turn,
    # on the same episodes, so that a loaded machine slows them alike; each Python rate is
    # set against the Rust rate of its own repeat.
    rust_rates, ratios, overheads = [], {n: [] for n in runs}, {n: [] for n in runs}
    py_rates = {n: [] for n in runs}
    for _ in range(a.repeats):
        rates, rust_steps = _core.rust_steps_per_s(setting, seed=a.seed, repeats=1)
        rust = rates[0]
        rust_rates.append(rust)
        for name, fn in runs.items():
            r, steps = rate(fn)
            assert steps == rust_steps, (name, steps, rust_steps)  # the same decisions
            py_rates[name].append(r)
            ratios[name].append(r / rust)
            overheads[name].append(1e6 / r - 1e6 / rust)
    med = statistics.median
    # The agent's own share of the overhead: Rust's first-legal rule costs next to nothing.
    _, info = raw.reset(0, a.seed)
    mask, calls = info["action_mask"], 100_000
    agent_us = timeit.timeit(lambda: first_legal(mask), number=calls) / calls * 1e6
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"{a.trace} on {a.cluster}: {a.windows} episodes of {a.window_jobs}-job windows, "
        f"{rust_steps} steps per repeat, first-legal agent, one core, medians of {a.repeats} "
        f"repeats (1-min load average {load:.2f})"
    )
    rust = med(rust_rates)
    print(f"  {'Rust SchedEnv (no Python)':<26} {rust:>9.0f} steps/s  {1e6 / rust:6.2f} us/step")
    for name in runs:
        r = med(py_rates[name])
        print(
            f"  {name:<26} {r:>9.0f} steps/s  {1e6 / r:6.2f} us/step  "
            f"{med(ratios[name]):.2f}x Rust, +{med(overheads[name]):.2f} us/step over Rust; "
            f"{r / 50_000:.2f}x the 50k bar"
        )
    print(f"  (of each overhead, the Python agent first_legal itself: {agent_us:.2f} us/step)")


if __name__ == "__main__":
    main()
