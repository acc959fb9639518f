"""Lachesis from Python: a Gymnasium environment over the simulator (`lachesis.gym`), and the
comparison harness (`compare`), the simulator (`simulate`) and the trace readers
(`read_trace`) returning pandas DataFrames.

A policy is a registry name (``"fifo/best-fit"``, ``"tiresias/best-fit/las-preempt"``,
``"rl:models/default"``; see ``lachesis policies``) or a Python callable
``scorer(obs, action_mask) -> scores``: ``obs`` as the environment returns it, one score per
candidate row (higher is better; masked rows are ignored). A callable decides exactly as an
agent taking the best-scored legal action in ``lachesis.gym.SchedulingEnv`` would.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import pandas as pd

from . import _core
from ._core import (
    CANDIDATE_FEATURES,
    FEATURE_BOUND,
    FEATURE_SCHEMA_VERSION,
    GLOBAL_FEATURES,
    MAX_CANDIDATES,
    WAIT_ACTION,
    EpisodeOver,
)

__version__ = _core.__version__

Scorer = Callable[[dict, Any], Any]
PolicyArg = Union[str, Scorer, "tuple[str, Scorer]"]

__all__ = [
    "CANDIDATE_FEATURES",
    "FEATURE_BOUND",
    "FEATURE_SCHEMA_VERSION",
    "GLOBAL_FEATURES",
    "MAX_CANDIDATES",
    "WAIT_ACTION",
    "EpisodeOver",
    "Comparison",
    "Simulation",
    "compare",
    "simulate",
    "read_trace",
    "policies",
]


def _env_config(config: Optional[dict]) -> Optional[str]:
    return None if config is None else json.dumps(config)


def _policies(policies: Iterable[PolicyArg]) -> "tuple[list[str], dict[str, Scorer]]":
    """Names in order, and the callables by name (a callable is named by ``__name__``)."""
    names: list[str] = []
    scorers: dict[str, Scorer] = {}
    for p in policies:
        if isinstance(p, str):
            name = p
        elif isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) and callable(p[1]):
            name, scorers[p[0]] = p[0], p[1]
        elif callable(p):
            name = getattr(p, "__name__", type(p).__name__)
            scorers[name] = p
        else:
            raise TypeError(f"policy {p!r}: give a registry name, a callable or (name, callable)")
        if name in names:
            raise ValueError(f"policy {name!r} appears twice")
        names.append(name)
    return names, scorers


@dataclass
class Comparison:
    """What `compare` returns.

    runs:   one row per (unit, policy): the unit (window, load, seed) and the run's summary
            (the columns of ``lachesis compare``'s runs.csv, and more).
    paired: one row per (metric, policy): the mean over units and, against the baseline, the
            mean paired difference (policy - baseline) with its bootstrap 95% interval
            (``ci_low``, ``ci_high``), wins and losses over units.
    setup:  the comparison's setup (as comparison.json's ``setup``), with its ``verdict``.
    table:  the terminal table ``lachesis compare`` prints.
    """

    runs: pd.DataFrame
    paired: pd.DataFrame
    units: pd.DataFrame
    setup: dict
    table: str
    warnings: list

    @property
    def verdict(self) -> Optional[str]:
        return self.setup.get("verdict")

    def __str__(self) -> str:
        return self.table + ("\n" + self.verdict if self.verdict else "")


def compare(
    policies: Sequence[PolicyArg],
    trace: str = "traces/itp/cluster10.csv",
    cluster: str = "3x8:V100",
    *,
    baseline: Optional[str] = None,
    seeds: int = 1,
    windows: int = 12,
    window_jobs: int = 150,
    loads: Sequence[Optional[float]] = (0.8, 1.0, 1.2),
    tick_s: Optional[float] = None,
    threads: Optional[int] = None,
    resamples: int = 2000,
    format: Optional[str] = None,
    env_config: Optional[dict] = None,
) -> Comparison:
    """Every policy on identical units (``windows`` random windows of ``window_jobs`` jobs x
    ``loads`` x ``seeds``), as ``lachesis compare`` runs them: the same units, runs and
    statistics for the same arguments. ``env_config`` is the environment config a callable
    was trained with (its shortlist); ``None`` in ``loads`` keeps the trace's own load."""
    names, scorers = _policies(policies)
    text = _core.compare(
        trace,
        cluster,
        names,
        scorers,
        baseline=baseline,
        seeds=seeds,
        windows=windows,
        window_jobs=window_jobs,
        loads=list(loads),
        tick_s=tick_s,
        threads=threads,
        resamples=resamples,
        format=format,
        env_config=_env_config(env_config),
    )
    out = json.loads(text)
    return Comparison(
        runs=pd.DataFrame(out["runs"]),
        paired=pd.DataFrame(out["paired"]),
        units=pd.DataFrame(out["units"]),
        setup=out["setup"],
        table=out["table"],
        warnings=out["warnings"],
    )


@dataclass
class Simulation:
    """What `simulate` returns: the summary (as ``lachesis simulate --json``), one row per job
    (jobs.csv) and the timeline (timeline.csv)."""

    summary: dict
    jobs: pd.DataFrame
    timeline: pd.DataFrame


def simulate(
    policy: PolicyArg,
    trace: str,
    cluster: str,
    *,
    seed: int = 0,
    load: Optional[float] = None,
    tick_s: Optional[float] = None,
    skip_unplaceable: bool = True,
    format: Optional[str] = None,
    env_config: Optional[dict] = None,
) -> Simulation:
    """Replays ``trace`` on ``cluster`` under one policy (a name or a callable)."""
    names, scorers = _policies([policy])
    scorer = scorers.get(names[0])
    summary, jobs, timeline = _core.simulate(
        trace,
        cluster,
        names[0],
        scorer,
        seed=seed,
        load=load,
        tick_s=tick_s,
        skip_unplaceable=skip_unplaceable,
        format=format,
        env_config=_env_config(env_config),
    )
    return Simulation(
        summary=json.loads(summary),
        jobs=pd.read_csv(io.StringIO(jobs)),
        timeline=pd.read_csv(io.StringIO(timeline)),
    )


def read_trace(path: str, format: Optional[str] = None) -> pd.DataFrame:
    """A trace in any format Lachesis reads (detected from its header, or ``format``), one
    row per job in the normalized columns (docs/trace-format.md); ``df.attrs["format"]`` is
    the format read."""
    text, fmt = _core.read_trace(path, format)
    df = pd.read_csv(io.StringIO(text), skiprows=2, keep_default_na=False)
    df.attrs["format"] = fmt
    return df


def policies() -> pd.DataFrame:
    """The heuristic registry's parts (``ORDER/PLACE[/MODIFIER...]``)."""
    return pd.DataFrame(_core.policy_names(), columns=["part", "name", "summary"])


from . import gym  # noqa: E402  (registers lachesis/Scheduling-v0)
