"""Conformance of kvrl's built-in environments with Gymnasium and POPGym.

Each case resets the reference, copies its state into the kvrl environment
(`kvrl env-rollout`), plays the same actions in both and compares observations and
rewards to 1e-6 and the termination and truncation flags exactly.
"""
import subprocess

import gymnasium as gym
import numpy as np
import pytest
import torch
from popgym.envs.position_only_cartpole import PositionOnlyCartPole
from popgym.envs.repeat_previous import RepeatPrevious


def kvrl_rollout(kvrl_bin, tmp_path, name, state, actions, options=None, states=None):
    payload = {"name": name, "state": torch.as_tensor(np.asarray(state, dtype=np.float64)),
               "actions": torch.as_tensor(np.asarray(actions, dtype=np.float32))}
    if states is not None:
        payload["states"] = torch.as_tensor(np.asarray(states, dtype=np.float64))
    if options:
        payload["options"] = options
    torch.save(payload, tmp_path / "in.pt")
    result = subprocess.run([kvrl_bin, "env-rollout", str(tmp_path / "in.pt"), str(tmp_path / "out.pt")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return torch.load(tmp_path / "out.pt", weights_only=True)


def reference_rollout(env, actions):
    observations, rewards, terminated, truncated = [], [], [], []
    for action in actions:
        obs, reward, term, trunc, _ = env.step(action)
        observations.append(np.asarray(obs, dtype=np.float32).reshape(-1))
        rewards.append(float(reward))
        terminated.append(bool(term))
        truncated.append(bool(trunc))
        if term or trunc:
            break
    return np.stack(observations), np.array(rewards), np.array(terminated), np.array(truncated)


def assert_same(ours, reference, initial_reference):
    observations, rewards, terminated, truncated = reference
    np.testing.assert_allclose(ours["initial_observation"].numpy(), initial_reference, rtol=0, atol=1e-6)
    assert ours["observations"].shape[0] == len(rewards), "episode lengths differ"
    np.testing.assert_allclose(ours["observations"].numpy(), observations, rtol=0, atol=1e-6)
    np.testing.assert_allclose(ours["rewards"].numpy(), rewards, rtol=0, atol=1e-6)
    assert ours["terminated"].tolist() == terminated.tolist()
    assert ours["truncated"].tolist() == truncated.tolist()



CASES = {
    "CartPole-v1": lambda rng, n: rng.integers(0, 2, size=(n, 1)),
    "Acrobot-v1": lambda rng, n: rng.integers(0, 3, size=(n, 1)),
    "MountainCar-v0": lambda rng, n: rng.integers(0, 3, size=(n, 1)),
    "Pendulum-v1": lambda rng, n: rng.uniform(-3.0, 3.0, size=(n, 1)),  # beyond the bounds: clipped
}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("name", sorted(CASES))
def test_classic_control_matches_gymnasium(kvrl_bin, tmp_path, name, seed):
    env = gym.make(name)
    initial, _ = env.reset(seed=seed)
    state = np.array(env.unwrapped.state, dtype=np.float64)
    actions = CASES[name](np.random.default_rng(seed), env.spec.max_episode_steps + 5)
    step_actions = [a.astype(np.float32) if name == "Pendulum-v1" else int(a[0]) for a in actions]
    reference = reference_rollout(env, step_actions)
    ours = kvrl_rollout(kvrl_bin, tmp_path, name, state, actions)
    assert_same(ours, reference, np.asarray(initial, dtype=np.float32))


@pytest.mark.parametrize("seed", range(3))
def test_cartpole_reaches_the_time_limit_like_gymnasium(kvrl_bin, tmp_path, seed):
    env = gym.make("CartPole-v1")
    initial, _ = env.reset(seed=seed)
    state = np.array(env.unwrapped.state, dtype=np.float64)
    # A controller that keeps the pole up, so the episode ends by truncation at 500. Over
    # 500 balanced steps last-bit differences between NumPy's and libm's cos/sin grow past
    # 1e-6, so every step starts from Gymnasium's state (the time limit still counts on).
    actions, states, observations, rewards, terminated, truncated = [], [], [], [], [], []
    obs = initial
    for _ in range(505):
        action = int(obs[2] + 0.5 * obs[3] + 0.01 * obs[0] + 0.1 * obs[1] > 0)
        actions.append([action])
        states.append(np.array(env.unwrapped.state, dtype=np.float64))
        obs, reward, term, trunc, _ = env.step(action)
        observations.append(obs)
        rewards.append(reward)
        terminated.append(term)
        truncated.append(trunc)
        if term or trunc:
            break
    assert truncated[-1], "the controller should balance CartPole to the time limit"
    ours = kvrl_rollout(kvrl_bin, tmp_path, "CartPole-v1", state, actions, states=states)
    assert len(rewards) == 500
    assert_same(ours, (np.stack(observations), np.array(rewards), np.array(terminated), np.array(truncated)),
                np.asarray(initial, dtype=np.float32))


@pytest.mark.parametrize("seed", range(3))
def test_stateless_cartpole_matches_popgym(kvrl_bin, tmp_path, seed):
    env = PositionOnlyCartPole()
    initial, _ = env.reset(seed=seed)
    state = np.array(env.state, dtype=np.float64)
    actions = np.random.default_rng(seed).integers(0, 2, size=(210, 1))
    reference = reference_rollout(env, [int(a[0]) for a in actions])
    ours = kvrl_rollout(kvrl_bin, tmp_path, "StatelessCartPole", state, actions)
    assert_same(ours, reference, np.asarray(initial, dtype=np.float32))


@pytest.mark.parametrize("seed", range(3))
def test_repeat_previous_matches_popgym(kvrl_bin, tmp_path, seed):
    env = RepeatPrevious(num_decks=1, k=4)
    first, _ = env.reset(seed=seed)
    # POPGym deals from the end of its shuffled index; kvrl's state is the dealing order.
    suits = env.deck.suits_idx[env.deck.idx[::-1]]
    rng = np.random.default_rng(seed)
    # Half the actions copy the right answer so both reward signs occur.
    actions = []
    observations, rewards, terminated, truncated = [], [], [], []
    for t in range(60):
        right = suits[t + 1 - 4] if t + 1 >= 4 else 0
        action = int(right) if rng.random() < 0.5 else int(rng.integers(0, 4))
        actions.append([action])
        obs, reward, term, trunc, _ = env.step(action)
        observations.append(np.eye(4, dtype=np.float32)[obs])
        rewards.append(reward)
        terminated.append(term)
        truncated.append(trunc)
        if term or trunc:
            break
    ours = kvrl_rollout(kvrl_bin, tmp_path, "RepeatPrevious", suits, actions, {"num_decks": 1, "k": 4})
    assert_same(ours, (np.stack(observations), np.array(rewards), np.array(terminated), np.array(truncated)),
                np.eye(4, dtype=np.float32)[first])
    assert len(rewards) == 51 and terminated[-1]


def test_bad_environment_name_lists_the_built_ins(kvrl_bin, tmp_path):
    torch.save({"name": "CartPole-v0", "state": torch.zeros(4), "actions": torch.zeros(1, 1)}, tmp_path / "in.pt")
    result = subprocess.run([kvrl_bin, "env-rollout", str(tmp_path / "in.pt"), str(tmp_path / "out.pt")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "unknown environment 'CartPole-v0' (built in: Acrobot-v1, CartPole-v1," in result.stderr


def test_an_action_outside_the_space_is_an_error(kvrl_bin, tmp_path):
    torch.save({"name": "CartPole-v1", "state": torch.zeros(4, dtype=torch.float64),
                "actions": torch.tensor([[2.0]])}, tmp_path / "in.pt")
    result = subprocess.run([kvrl_bin, "env-rollout", str(tmp_path / "in.pt"), str(tmp_path / "out.pt")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "action 2.000000 is not in discrete(2)" in result.stderr


def test_kvrl_loads_the_example_plugin(kvrl_bin, tmp_path):
    import os

    plugin = os.environ["KVRL_EXAMPLE_PLUGIN"]
    torch.save({"plugin": plugin, "options": {"best_arm": 1}, "actions": torch.tensor([[1.0], [0.0], [1.0]])},
               tmp_path / "in.pt")
    result = subprocess.run([kvrl_bin, "env-rollout", str(tmp_path / "in.pt"), str(tmp_path / "out.pt")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert torch.load(tmp_path / "out.pt", weights_only=True)["rewards"].tolist() == [1.0, 0.0, 1.0]
