"""The Gymnasium bridge (env.name: gym:<id>) through `kvrl env-rollout`: the Python
environment runs inside kvrl's process, and its episodes must be Gymnasium's own, for the
same seed and actions, and the native CartPole's from the same state. Spaces: Box of any
shape, Discrete and MultiDiscrete (one-hot observations; a MultiDiscrete action is one
index over the product of its choices, the last component varying fastest); others are
refused by name, as are options that belong to the native environments."""
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "conformance"))
import bridge_envs  # noqa: E402,F401  (registers the test environments here too)
from env_rollouts import assert_same, reference_rollout  # noqa: E402

KVRL = os.environ.get("KVRL_BIN")
# The embedded interpreter finds bridge_envs through PYTHONPATH, as a user's module would.
ENV = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")


def rollout(tmp_path, payload):
    torch.save(payload, tmp_path / "in.pt")
    result = subprocess.run([KVRL, "env-rollout", str(tmp_path / "in.pt"), str(tmp_path / "out.pt")],
                            capture_output=True, text=True, timeout=120, env=ENV)
    return result, (torch.load(tmp_path / "out.pt", weights_only=True) if result.returncode == 0 else None)


def bridged(tmp_path, gym_id, seed, actions):
    result, output = rollout(tmp_path, {"name": f"gym:{gym_id}", "seed": seed,
                                        "actions": torch.as_tensor(np.asarray(actions, dtype=np.float32))})
    assert result.returncode == 0, result.stderr
    return output


@pytest.mark.parametrize("seed", range(3))
def test_gym_cartpole_is_gymnasiums_and_the_native_cartpoles_from_the_same_state(tmp_path, seed):
    actions = np.random.default_rng(seed).integers(0, 2, size=(505, 1))
    ours = bridged(tmp_path, "CartPole-v1", seed, actions)
    env = gym.make("CartPole-v1")
    initial, _ = env.reset(seed=seed)  # the bridge resets Gymnasium with the same seed
    state = np.array(env.unwrapped.state, dtype=np.float64)
    reference = reference_rollout(env, [int(a[0]) for a in actions])
    assert_same(ours, reference, np.asarray(initial, dtype=np.float32))
    # The native CartPole-v1 from that state: the same trajectory.
    _, native = rollout(tmp_path, {"name": "CartPole-v1", "state": torch.as_tensor(state),
                                   "actions": torch.as_tensor(actions.astype(np.float32))})
    for key in ("observations", "rewards", "terminated", "truncated"):
        assert torch.equal(native[key], ours[key]), key


def test_a_discrete_observation_is_one_hot(tmp_path):
    actions = np.random.default_rng(4).integers(0, 4, size=(100, 1))
    ours = bridged(tmp_path, "FrozenLake-v1", 4, actions)
    env = gym.make("FrozenLake-v1")
    initial, _ = env.reset(seed=4)
    observations, rewards, terminated, truncated = reference_rollout(env, [int(a[0]) for a in actions])
    one_hot = np.eye(16, dtype=np.float32)
    assert_same(ours, (one_hot[observations[:, 0].astype(int)], rewards, terminated, truncated), one_hot[initial])


def test_box_spaces_of_any_shape_are_flattened(tmp_path):
    actions = np.random.default_rng(5).uniform(-1, 1, size=(12, 4)).astype(np.float32)
    ours = bridged(tmp_path, "bridge_envs:BoxGrid-v0", 5, actions)
    env = gym.make("BoxGrid-v0")
    initial, _ = env.reset(seed=5)
    reference = reference_rollout(env, [a.reshape(2, 2) for a in actions])
    assert ours["observations"].shape == (12, 6)
    assert_same(ours, reference, initial.reshape(-1))


def test_multi_discrete_spaces(tmp_path):
    # Index 4 of MultiDiscrete([2, 3]) is (1, 1); index 2 is (0, 2).
    actions = np.array([[4], [2], [5], [0], [3], [1], [4], [4], [2], [0]])
    ours = bridged(tmp_path, "bridge_envs:MultiDiscreteEcho-v0", 6, actions)
    env = gym.make("MultiDiscreteEcho-v0")
    initial, _ = env.reset(seed=6)
    components = [np.array([a // 3, a % 3]) for a in actions[:, 0]]
    observations, rewards, terminated, truncated = reference_rollout(env, components)
    observations = observations.astype(int)
    one_hot = lambda o: np.concatenate([np.eye(3)[o[0]], np.eye(4)[o[1]]]).astype(np.float32)  # noqa: E731
    assert_same(ours, (np.stack([one_hot(o) for o in observations]), rewards, terminated, truncated),
                one_hot(initial))
    assert rewards.sum() > 0, "the echo must pay at least once for the case to mean anything"


def test_setup_registers_the_id_and_wrappers_wrap_each_environment(tmp_path):
    actions = np.random.default_rng(6).uniform(-1, 1, size=(12, 4)).astype(np.float32)
    result, ours = rollout(tmp_path, {"name": "gym:LateGrid-v0", "seed": 6, "actions": torch.as_tensor(actions),
                                      "gym_setup": ["bridge_envs:register_late_envs"],
                                      "gym_wrappers": ["bridge_envs:NegatedObservation"]})
    assert result.returncode == 0, result.stderr
    env = bridge_envs.NegatedObservation(gym.make("BoxGrid-v0"))
    initial, _ = env.reset(seed=6)
    assert_same(ours, reference_rollout(env, actions.reshape(12, 2, 2)), initial.reshape(-1))
    without, _ = rollout(tmp_path, {"name": "gym:LateGrid-v0", "resets": 1})
    assert "gym:LateGrid-v0: gymnasium.make refused it" in without.stderr
    broken, _ = rollout(tmp_path, {"name": "gym:LateGrid-v0", "resets": 1, "gym_setup": ["bridge_envs:nothing"]})
    assert "env.gym_setup 'bridge_envs:nothing' cannot be loaded" in broken.stderr, broken.stderr
    native, _ = rollout(tmp_path, {"name": "CartPole-v1", "resets": 1, "gym_wrappers": ["a:b"]})
    assert "env.gym_wrappers: Python callables apply to gym:<id> environments only, not to CartPole-v1" in \
        native.stderr, native.stderr


def test_terminated_wins_over_truncated_on_the_same_step(tmp_path):
    ours = bridged(tmp_path, "bridge_envs:GoalOnTheLastStep-v0", 0, np.ones((5, 1)))
    assert ours["terminated"].tolist() == [False] * 4 + [True]
    assert ours["truncated"].tolist() == [False] * 5  # a terminal state: nothing to bootstrap


@pytest.mark.parametrize("payload, message", [
    ({"name": "gym:bridge_envs:TupleSpace-v0", "resets": 1},
     "gym:bridge_envs:TupleSpace-v0: its observation space Tuple(Discrete(2), Discrete(3)) is not supported "
     "(supported: Box of any shape, Discrete, MultiDiscrete)"),
    ({"name": "gym:NoSuchEnv-v0", "resets": 1}, "gym:NoSuchEnv-v0: gymnasium.make refused it"),
    ({"name": "gym:CartPole-v1", "resets": 1, "options": {"max_episode_steps": 10}},
     "env.options.max_episode_steps: gym:CartPole-v1 takes gymnasium.make's keyword arguments as "
     "env.kwargs.<name>"),
    ({"name": "gym:", "resets": 1}, "env.name 'gym:' names no Gymnasium id"),
])
def test_what_the_bridge_cannot_take_is_refused_by_name(tmp_path, payload, message):
    result, _ = rollout(tmp_path, payload)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr, result.stderr


def test_a_python_exception_in_step_reports_its_traceback(tmp_path):
    result, _ = rollout(tmp_path, {"name": "gym:bridge_envs:RaisesInStep-v0", "actions": torch.zeros(10, 1)})
    assert result.returncode != 0
    assert "gym:bridge_envs:RaisesInStep-v0 step() raised a Python exception" in result.stderr
    assert "Traceback (most recent call last)" in result.stderr
    assert "ValueError: bridge_envs.RaisesInStep: the sensor failed at step 4" in result.stderr
