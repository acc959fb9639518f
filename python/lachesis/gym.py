"""Gymnasium environments over the Lachesis simulator.

``SchedulingEnv`` (registered as ``lachesis/Scheduling-v0``) schedules one trace window per
episode on a cluster. An observation is a dict: ``candidates``, one feature row per candidate
action (``MAX_CANDIDATES`` x ``len(CANDIDATE_FEATURES)``, padded; the last row is "wait") and
``global`` (``len(GLOBAL_FEATURES)``), float32 in ``[-FEATURE_BOUND, FEATURE_BOUND]``. An action
is a row index (``Discrete(MAX_CANDIDATES)``); ``info["action_mask"]`` says which are legal, as
MaskablePPO (``action_masks()``) and Gymnasium's masked sampling expect. Placing a job keeps
the clock; "wait" (``WAIT_ACTION``) lets time run to the next decision point. ``terminated``:
every job finished; ``truncated``: a step or time limit, or a stall. ``reset(seed=...)`` picks
the window and the simulation seed from ``seed``: same seed and actions, same episode.

``SchedulingVectorEnv`` steps ``num_envs`` such environments in Rust (on ``threads``
threads), each reset on the step its episode ends (Gymnasium's ``AutoresetMode.SAME_STEP``:
the last observation of an ended episode is in ``infos["final_obs"]``).
"""

from __future__ import annotations

import copy
import json
from typing import Optional

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from . import _core

ENV_ID = "lachesis/Scheduling-v0"

#: What every environment starts from: windows may hold a job no node can ever fit, which is
#: skipped (and counted) rather than refused.
DEFAULT_CONFIG: dict = {"sim": {"skip_unplaceable": True}}


def _config_json(config: Optional[dict]) -> str:
    """``DEFAULT_CONFIG`` updated by ``config`` (``sim`` and ``reward`` merged key by key)."""
    merged = copy.deepcopy(DEFAULT_CONFIG)
    for key, value in (config or {}).items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key].update(value)
        else:
            merged[key] = value
    return json.dumps(merged)


def observation_space() -> spaces.Dict:
    """One environment's observation space."""
    bound = _core.FEATURE_BOUND
    rows, width = _core.MAX_CANDIDATES, len(_core.CANDIDATE_FEATURES)
    return spaces.Dict(
        {
            "candidates": spaces.Box(-bound, bound, (rows, width), np.float32),
            "global": spaces.Box(-bound, bound, (len(_core.GLOBAL_FEATURES),), np.float32),
        }
    )


def _setting(
    trace: str = "traces/itp/cluster10.csv",
    cluster: str = "3x8:V100",
    *,
    window_jobs: int = 256,
    windows: int = 16,
    window_seed: int = 0,
    load: Optional[float] = None,
    format: Optional[str] = None,
    config: Optional[dict] = None,
    illegal_action: str = "wait",
    render_mode: Optional[str] = None,
) -> "tuple[_core.Setting, str]":
    """The windows, cluster and config both environments' arguments describe (see
    ``SchedulingEnv``), read once, and the illegal-action mode."""
    if render_mode is not None:
        raise ValueError(f"render_mode {render_mode!r}: this environment does not render")
    setting = _core.Setting(
        trace,
        cluster,
        window_jobs=window_jobs,
        windows=windows,
        load=load,
        seed=window_seed,
        format=format,
        config=_config_json(config),
    )
    return setting, illegal_action


class SchedulingEnv(gymnasium.Env):
    """One scheduling environment (see the module's docs).

    trace, cluster: a trace file in any format Lachesis reads, and a cluster (preset, shape
        such as ``3x8:V100``, TOML file, or ``auto``) as ``lachesis simulate`` takes them.
    Keyword arguments:
    window_jobs, windows, window_seed: episodes are drawn from ``windows`` (16) seeded random
        windows of ``window_jobs`` (256) consecutive jobs (``window_jobs=0``: the whole
        trace); ``window_seed`` (0) seeds the cut.
    load: scale every window's arrivals to this offered load (default: the trace's own).
    format: the trace's format (default: detected from its header).
    config: the environment config (docs/training-config.md's ``[env]``: ``jobs_considered``,
        ``proposers``, ``reward``, ``sim``, ``max_steps``, ...), as a dict.
    illegal_action: ``"wait"`` (the default) takes a masked action as the default one (wait,
        or the first legal action where wait is masked) and says so in
        ``info["illegal_action"]``; ``"raise"`` raises ``ValueError``.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        trace: str = "traces/itp/cluster10.csv",
        cluster: str = "3x8:V100",
        **options,
    ):
        setting, illegal_action = _setting(trace, cluster, **options)
        self._env = _core.Env(setting, illegal_action)
        self.observation_space = observation_space()
        self.action_space = spaces.Discrete(_core.MAX_CANDIDATES)

    @property
    def windows(self) -> int:
        """How many windows episodes are drawn from."""
        return self._env.windows

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        """Starts an episode; ``options={"window": i}`` picks the window instead of the RNG."""
        super().reset(seed=seed)
        if options and "window" in options:
            window = int(options["window"])
        else:
            window = int(self.np_random.integers(self._env.windows))
        obs, info = self._env.reset(window, int(self.np_random.integers(2**63)))
        info["window"] = window
        return obs, info

    def step(self, action):
        return self._env.step(action)

    def action_masks(self) -> np.ndarray:
        """The legal actions now (MaskablePPO's hook)."""
        return self._env.action_mask()


class SchedulingVectorEnv(VectorEnv):
    """``num_envs`` scheduling environments stepped together by the Rust ``VecEnv`` (the same
    arguments as ``SchedulingEnv``, plus ``threads``). Windows and episode seeds are drawn
    from ``reset``'s seed; the result does not depend on ``threads``."""

    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self,
        num_envs: int = 8,
        trace: str = "traces/itp/cluster10.csv",
        cluster: str = "3x8:V100",
        *,
        threads: int = 1,
        **options,
    ):
        setting, illegal_action = _setting(trace, cluster, **options)
        self._env = _core.VecEnv(num_envs, setting, threads, illegal_action)
        self.num_envs = num_envs
        self.single_observation_space = observation_space()
        self.single_action_space = spaces.Discrete(_core.MAX_CANDIDATES)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._reset_once = False

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._reset_once = True
        return self._env.reset(int(self.np_random.integers(2**63)))

    def step(self, actions):
        if not self._reset_once:
            raise _core.EpisodeOver("step() before reset(): call reset()")
        actions = np.asarray(actions, dtype=np.int64).reshape(self.num_envs).tolist()
        obs, rewards, terminated, truncated, infos, final = self._env.step(actions)
        if final is not None:
            ended = np.array([f is not None for f in final])
            final_obs = np.empty(self.num_envs, dtype=object)
            final_obs[:] = final
            infos["final_obs"], infos["_final_obs"] = final_obs, ended
        return obs, rewards, terminated, truncated, infos


def _register() -> None:
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(
            id=ENV_ID,
            entry_point="lachesis.gym:SchedulingEnv",
            vector_entry_point="lachesis.gym:SchedulingVectorEnv",
        )


_register()

__all__ = ["ENV_ID", "DEFAULT_CONFIG", "SchedulingEnv", "SchedulingVectorEnv", "observation_space"]
