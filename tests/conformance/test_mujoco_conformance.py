"""Conformance of kvrl's native MuJoCo locomotion environments with Gymnasium's v5 ones.

Both sides run the same MuJoCo library (the mujoco-core wheel; Gymnasium through the
Python bindings, kvrl through the C API). Each rollout case resets Gymnasium, copies its
state [qpos, qvel] into kvrl (`kvrl env-rollout`), plays the same float32 actions in both
over the whole episode (to termination, or to the 1000-step time limit with termination
off) and compares observations and rewards to 1e-6 and the termination and truncation
flags exactly. The reset cases compare kvrl's own reset distribution with Gymnasium's.
"""
import subprocess

import gymnasium as gym
import numpy as np
import pytest
import torch

from env_rollouts import (assert_same, assert_same_moments, env_rollout, kvrl_resets, kvrl_rollout,
                          reference_resets, reference_rollout)

NAMES = ["Ant-v5", "HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"]
# Observation layout: leading qpos left out (x; Ant also y), then qpos, qvel, Ant's forces.
SKIPPED_POSITIONS = {"Ant-v5": 2, "HalfCheetah-v5": 1, "Hopper-v5": 1, "Walker2d-v5": 1}


def reset_gymnasium(name, seed, **kwargs):
    env = gym.make(name, **kwargs)
    initial, _ = env.reset(seed=seed)
    data = env.unwrapped.data
    return env, initial, np.concatenate([data.qpos, data.qvel])


def random_actions(env, seed, steps, reach=1.2):
    """Uniform actions a little beyond the bounds: MuJoCo clamps the controls, the control
    cost is paid on the action as given."""
    size = env.action_space.shape[0]
    return np.random.default_rng(seed).uniform(-reach, reach, size=(steps, size)).astype(np.float32)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", NAMES)
def test_locomotion_episode_matches_gymnasium(kvrl_bin, tmp_path, name, seed):
    env, initial, state = reset_gymnasium(name, seed)
    actions = random_actions(env, seed, env.spec.max_episode_steps + 5)
    reference = reference_rollout(env, list(actions))
    ours = kvrl_rollout(kvrl_bin, tmp_path, name, state, actions)
    assert_same(ours, reference, np.asarray(initial, dtype=np.float32))


# With termination off every task runs to Gymnasium's TimeLimit: 1000 steps, truncated.
@pytest.mark.parametrize("name", NAMES)
def test_locomotion_runs_to_the_time_limit_like_gymnasium(kvrl_bin, tmp_path, name):
    kwargs, options = {}, None
    if name != "HalfCheetah-v5":  # the cheetah never terminates
        kwargs, options = {"terminate_when_unhealthy": False}, {"terminate_when_unhealthy": 0}
    env, initial, state = reset_gymnasium(name, 7, **kwargs)
    actions = random_actions(env, 7, 1005, reach=1.0)
    reference = reference_rollout(env, list(actions))
    ours = kvrl_rollout(kvrl_bin, tmp_path, name, state, actions, options)
    assert len(reference[1]) == 1000 and reference[3][-1]
    assert_same(ours, reference, np.asarray(initial, dtype=np.float32))


def test_gymnasium_keyword_options_change_the_task_alike(kvrl_bin, tmp_path):
    kwargs = {"forward_reward_weight": 2.0, "ctrl_cost_weight": 0.05, "healthy_reward": 0.5, "frame_skip": 2}
    env, initial, state = reset_gymnasium("Hopper-v5", 3, **kwargs)
    actions = random_actions(env, 3, 300)
    reference = reference_rollout(env, list(actions))
    ours = kvrl_rollout(kvrl_bin, tmp_path, "Hopper-v5", state, actions, kwargs)
    assert_same(ours, reference, np.asarray(initial, dtype=np.float32))


@pytest.mark.parametrize("name", ["Hopper-v5", "Walker2d-v5"])
def test_max_episode_steps_truncates_like_gymnasiums_time_limit(kvrl_bin, tmp_path, name):
    env, initial, state = reset_gymnasium(name, 5, max_episode_steps=40, terminate_when_unhealthy=False)
    actions = random_actions(env, 5, 60, reach=0.3)
    reference = reference_rollout(env, list(actions))
    ours = kvrl_rollout(kvrl_bin, tmp_path, name, state, actions,
                        {"max_episode_steps": 40, "terminate_when_unhealthy": 0})
    assert len(reference[1]) == 40 and reference[3][-1]
    assert_same(ours, reference, np.asarray(initial, dtype=np.float32))


@pytest.mark.parametrize("part", ["positions", "velocities"])
@pytest.mark.parametrize("name", ["Ant-v5", "Hopper-v5"])
def test_partially_observed_variants_are_slices_of_the_full_observation(kvrl_bin, tmp_path, name, part):
    env, initial, state = reset_gymnasium(name, 2)
    data = env.unwrapped.data
    positions = data.qpos.size - SKIPPED_POSITIONS[name]
    columns = slice(0, positions) if part == "positions" else slice(positions, positions + data.qvel.size)
    actions = random_actions(env, 2, 200)
    observations, rewards, terminated, truncated = reference_rollout(env, list(actions))
    payload = {"name": name, "state": torch.as_tensor(state), "actions": torch.as_tensor(actions), "observe": part}
    ours = env_rollout(kvrl_bin, tmp_path, payload)
    assert ours["observations"].shape[1] == columns.stop - columns.start
    assert_same(ours, (observations[:, columns], rewards, terminated, truncated),
                np.asarray(initial, dtype=np.float32)[columns])


# Initial-state distributions -------------------------------------------------------------

RESETS = 2000


@pytest.mark.parametrize("name", NAMES)
def test_reset_distribution_matches_gymnasium(kvrl_bin, tmp_path, name):
    ours = kvrl_resets(kvrl_bin, tmp_path, name, RESETS, seed=11)
    theirs = reference_resets(gym.make(name), RESETS, seed=11)
    assert ours.shape == theirs.shape
    assert_same_moments(name, ours, theirs)
    # Every joint is randomised: a reset that forgot the noise would pass the moments only
    # where the reference has none.
    positions_and_velocities = ours.shape[1] if name != "Ant-v5" else 13 + 14
    assert np.all(ours[:, :positions_and_velocities].std(0) > 0)


# Bad input --------------------------------------------------------------------------------


def rollout_error(kvrl_bin, tmp_path, payload):
    torch.save(payload, tmp_path / "in.pt")
    result = subprocess.run([kvrl_bin, "env-rollout", str(tmp_path / "in.pt"), str(tmp_path / "out.pt")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    return result.stderr


@pytest.mark.parametrize("payload, message", [
    ({"name": "Hopper-v5", "state": torch.zeros(11, dtype=torch.float64), "actions": torch.zeros(1, 3)},
     "Hopper-v5: state has 11 values, expected 12 (qpos: 6, qvel: 6)"),
    ({"name": "Hopper-v5", "resets": 1, "options": {"frame_skip": 0}},
     "Hopper-v5: option frame_skip (0.000000) must be an integer in [1, 1000]"),
    ({"name": "HalfCheetah-v5", "resets": 1, "options": {"healthy_reward": 1.0}},
     "HalfCheetah-v5 has no option 'healthy_reward' (options: ctrl_cost_weight, forward_reward_weight, "
     "frame_skip, reset_noise_scale, max_episode_steps)"),
    ({"name": "Ant-v5", "resets": 1, "options": {"terminate_when_unhealthy": 0.5}},
     "Ant-v5: option terminate_when_unhealthy (0.500000) must be 0 or 1"),
    ({"name": "CartPole-v1", "resets": 1, "observe": "positions"},
     "env.observe: CartPole-v1 observes all of its observation; positions and velocities apply to the MuJoCo "
     "environments (Ant-v5, HalfCheetah-v5, Hopper-v5, Walker2d-v5)"),
    ({"name": "Hopper-v5", "resets": 1, "observe": "joints"},
     "input['observe'] must be 'all', 'positions' or 'velocities', got 'joints'"),
])
def test_bad_locomotion_input_is_refused_by_name(kvrl_bin, tmp_path, payload, message):
    assert message in rollout_error(kvrl_bin, tmp_path, payload)
