"""The Gymnasium environment: the checker, determinism, masks, episode ends, errors."""

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import lachesis
from lachesis.gym import ENV_ID, SchedulingEnv


def first_legal(info) -> int:
    legal = np.flatnonzero(info["action_mask"])
    non_wait = legal[legal != lachesis.WAIT_ACTION]
    return int(non_wait[0]) if len(non_wait) else lachesis.WAIT_ACTION


def play(env, seed, policy=first_legal):
    obs, info = env.reset(seed=seed)
    trajectory = []
    while True:
        action = policy(info)
        obs, reward, terminated, truncated, info = env.step(action)
        trajectory.append((action, reward, obs["candidates"].copy(), info["action_mask"].copy()))
        if terminated or truncated:
            return trajectory, terminated, truncated, info


def test_gymnasium_env_checker_passes(small_env_kwargs):
    check_env(SchedulingEnv(**small_env_kwargs))


def test_checker_passes_through_gymnasium_make(small_env_kwargs):
    env = gymnasium.make(ENV_ID, **small_env_kwargs)
    check_env(env.unwrapped)
    obs, info = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    assert info["action_mask"].shape == (lachesis.MAX_CANDIDATES,)


def test_spaces_follow_the_exported_schema(small_env_kwargs):
    env = SchedulingEnv(**small_env_kwargs)
    rows = env.observation_space["candidates"].shape
    assert rows == (lachesis.MAX_CANDIDATES, len(lachesis.CANDIDATE_FEATURES))
    assert env.observation_space["global"].shape == (len(lachesis.GLOBAL_FEATURES),)
    assert env.action_space.n == lachesis.MAX_CANDIDATES


def test_same_seed_same_episode(small_env_kwargs):
    env = SchedulingEnv(**small_env_kwargs)
    a, *_ = play(env, seed=11)
    b, *_ = play(env, seed=11)
    assert len(a) == len(b) > 0
    for (a1, r1, c1, m1), (a2, r2, c2, m2) in zip(a, b):
        assert a1 == a2 and r1 == r2
        np.testing.assert_array_equal(c1, c2)
        np.testing.assert_array_equal(m1, m2)


def test_masks_are_never_empty_and_obs_stay_in_bounds(small_env_kwargs):
    env = SchedulingEnv(**small_env_kwargs)
    rng = np.random.default_rng(0)
    obs, info = env.reset(seed=5)
    for _ in range(2000):
        mask = info["action_mask"]
        assert mask.dtype == bool and mask.any()
        assert env.observation_space.contains(obs)
        np.testing.assert_array_equal(env.action_masks(), mask)
        action = int(rng.choice(np.flatnonzero(mask)))
        obs, reward, terminated, truncated, info = env.step(action)
        assert np.isfinite(reward)
        assert not (terminated and truncated)
        assert "illegal_action" not in info
        if terminated or truncated:
            obs, info = env.reset()


def test_an_episode_ends_and_a_step_after_the_end_raises(small_env_kwargs):
    env = SchedulingEnv(**small_env_kwargs)
    _, terminated, truncated, info = play(env, seed=2)
    assert terminated and info["end"] == "all-done"
    assert info["finished"] == info["jobs"]
    with pytest.raises(lachesis.EpisodeOver, match="call reset"):
        env.step(lachesis.WAIT_ACTION)


def test_a_step_before_reset_raises(small_env_kwargs):
    with pytest.raises(lachesis.EpisodeOver):
        SchedulingEnv(**small_env_kwargs).step(lachesis.WAIT_ACTION)


def test_step_limits_truncate(small_env_kwargs):
    env = SchedulingEnv(**small_env_kwargs, config={"max_steps": 5})
    _, terminated, truncated, info = play(env, seed=1)
    assert truncated and not terminated and info["end"] == "step-limit"


def test_illegal_actions_wait_or_raise(small_env_kwargs):
    env = SchedulingEnv(**small_env_kwargs)
    _, info = env.reset(seed=0)
    illegal = int(np.flatnonzero(~info["action_mask"])[0])
    _, _, _, _, info = env.step(illegal)
    assert info["illegal_action"] is True
    strict = SchedulingEnv(**small_env_kwargs, illegal_action="raise")
    _, info = strict.reset(seed=0)
    with pytest.raises(ValueError, match="not legal"):
        strict.step(int(np.flatnonzero(~info["action_mask"])[0]))


def test_errors_are_python_exceptions_with_the_rust_message(small_env_kwargs, tmp_path):
    kwargs = dict(small_env_kwargs)
    with pytest.raises(FileNotFoundError, match="no-such-trace.csv"):
        SchedulingEnv(**{**kwargs, "trace": str(tmp_path / "no-such-trace.csv")})
    with pytest.raises(ValueError, match="NOPE"):
        SchedulingEnv(**{**kwargs, "cluster": "4x8:NOPE"})
    with pytest.raises(ValueError, match="jobs_consideredd"):
        SchedulingEnv(**kwargs, config={"jobs_consideredd": 3})
    text, _ = lachesis._core.read_trace(kwargs["trace"])
    lines = text.splitlines()
    fields = lines[4].split(",")
    fields[1] = "notanumber"  # submit_s of the second job
    lines[4] = ",".join(fields)
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"bad\.csv line 5.*submit_s"):
        SchedulingEnv(**{**kwargs, "trace": str(bad)})
