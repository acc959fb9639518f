"""The vector environment: Gymnasium 1.x VectorEnv semantics, same-step autoreset."""

import gymnasium
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import lachesis
from lachesis.gym import ENV_ID, SchedulingVectorEnv


def first_legal(masks):
    actions = []
    for m in masks:
        legal = np.flatnonzero(m)
        non_wait = legal[legal != lachesis.WAIT_ACTION]
        actions.append(int(non_wait[0]) if len(non_wait) else lachesis.WAIT_ACTION)
    return np.array(actions)


def run(env, seed, steps):
    obs, infos = env.reset(seed=seed)
    out = []
    for _ in range(steps):
        obs, rewards, terminated, truncated, infos = env.step(first_legal(infos["action_mask"]))
        out.append((rewards.copy(), terminated.copy(), truncated.copy(), obs["global"].copy()))
    return out


def test_batched_spaces_and_shapes(small_env_kwargs):
    env = SchedulingVectorEnv(4, **small_env_kwargs)
    assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    obs, infos = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert infos["action_mask"].shape == (4, lachesis.MAX_CANDIDATES)
    assert env.action_space.shape == (4,)
    obs, rewards, terminated, truncated, infos = env.step(first_legal(infos["action_mask"]))
    assert rewards.shape == terminated.shape == truncated.shape == (4,)
    assert env.observation_space.contains(obs)


def test_episodes_reset_on_the_step_they_end(small_env_kwargs):
    env = SchedulingVectorEnv(2, **small_env_kwargs)
    obs, infos = env.reset(seed=1)
    ended = 0
    for _ in range(3000):
        obs, rewards, terminated, truncated, infos = env.step(first_legal(infos["action_mask"]))
        done = terminated | truncated
        if done.any():
            ended += int(done.sum())
            np.testing.assert_array_equal(infos["_final_obs"], done)
            for i in np.flatnonzero(done):
                assert set(infos["final_obs"][i]) >= {"candidates", "global"}
            assert infos["action_mask"][done].any(axis=1).all()
        if ended >= 3:
            break
    assert ended >= 3


def test_same_seed_same_steps_whatever_the_threads(small_env_kwargs):
    a = run(SchedulingVectorEnv(4, **small_env_kwargs, threads=1), 7, 200)
    b = run(SchedulingVectorEnv(4, **small_env_kwargs, threads=2), 7, 200)
    for x, y in zip(a, b):
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)


def test_make_vec_uses_the_rust_vector(small_env_kwargs):
    env = gymnasium.make_vec(
        ENV_ID, num_envs=3, vectorization_mode="vector_entry_point", **small_env_kwargs
    )
    obs, infos = env.reset(seed=0)
    assert obs["candidates"].shape[0] == 3


def test_a_step_before_reset_raises(small_env_kwargs):
    with pytest.raises(lachesis.EpisodeOver):
        SchedulingVectorEnv(2, **small_env_kwargs).step([lachesis.WAIT_ACTION] * 2)
