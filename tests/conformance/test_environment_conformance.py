"""Conformance of kvrl's built-in environments with Gymnasium and POPGym.

Each rollout case resets the reference, copies its state into the kvrl environment
(`kvrl env-rollout`), plays the same actions in both and compares observations and
rewards to 1e-6 and the termination and truncation flags exactly. The reset cases draw
many initial observations from kvrl's own reset (its own RNG) and from the reference's,
and compare the distributions: moments within sampling error, and the documented support.
"""
import math
import subprocess

import gymnasium as gym
import numpy as np
import pytest
import torch
from popgym.envs.position_only_cartpole import PositionOnlyCartPole
from popgym.envs.repeat_previous import RepeatPrevious

from env_rollouts import (assert_same, assert_same_moments, kvrl_resets, kvrl_rollout, reference_resets,
                          reference_rollout)


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


# Initial-state distributions -------------------------------------------------------------

RESETS = 4000
# Each end of the documented range must hold a draw within this fraction of its width:
# a uniform sample of 4000 misses it with probability 0.995^4000 ~ 2e-9.
EDGE_FRACTION = 0.005


def angle(cos, sin):
    return np.arctan2(sin, cos)


def one_hot(size):
    return lambda index: np.eye(size, dtype=np.float32)[index]


class TMazeCue:
    """CueRecallTMaze has no external reference: its documented reset, a fair coin for the
    cue (+1 left, -1 right) at the corridor's start."""

    def reset(self, seed=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        return np.array([1.0 if self.rng.integers(0, 2) == 0 else -1.0, 0.0, 0.0]), {}


# name: (make the reference, encode its observation, options, observation -> the reset
# variables whose distribution is documented, and their [low, high] support).
RESET_CASES = {
    "CartPole-v1": (lambda: gym.make("CartPole-v1"), np.asarray, None,
                    lambda o: o, [(-0.05, 0.05)] * 4),
    "StatelessCartPole": (PositionOnlyCartPole, np.asarray, None,
                          lambda o: o, [(-0.05, 0.05)] * 2),
    "Acrobot-v1": (lambda: gym.make("Acrobot-v1"), np.asarray, None,
                   lambda o: np.stack([angle(o[:, 0], o[:, 1]), angle(o[:, 2], o[:, 3]), o[:, 4], o[:, 5]], 1),
                   [(-0.1, 0.1)] * 4),
    "MountainCar-v0": (lambda: gym.make("MountainCar-v0"), np.asarray, None,
                       lambda o: o, [(-0.6, -0.4), (0.0, 0.0)]),
    "Pendulum-v1": (lambda: gym.make("Pendulum-v1"), np.asarray, None,
                    lambda o: np.stack([angle(o[:, 0], o[:, 1]), o[:, 2]], 1), [(-math.pi, math.pi), (-1.0, 1.0)]),
    # The first card's suit, one-hot: each suit a quarter of the time.
    "RepeatPrevious": (lambda: RepeatPrevious(num_decks=1, k=4), one_hot(4), {"num_decks": 1, "k": 4},
                       lambda o: o, [(0.0, 1.0)] * 4),
    "CueRecallTMaze": (TMazeCue, np.asarray, None, lambda o: o, [(-1.0, 1.0), (0.0, 0.0), (0.0, 0.0)]),
}


def assert_within_support(name, who, x, support):
    for column, (low, high) in enumerate(support):
        values = x[:, column]
        # Observations are float32: allow their rounding at the ends of the range.
        slack = 1e-6 * max(1.0, abs(low), abs(high))
        assert values.min() >= low - slack and values.max() <= high + slack, (
            f"{name} {who} reset variable {column} spans [{values.min()}, {values.max()}], "
            f"outside the documented [{low}, {high}]")
        edge = EDGE_FRACTION * (high - low)
        assert values.min() <= low + edge + slack and values.max() >= high - edge - slack, (
            f"{name} {who} reset variable {column} spans only [{values.min()}, {values.max()}] "
            f"of the documented [{low}, {high}]")


@pytest.mark.parametrize("name", sorted(RESET_CASES))
def test_reset_distribution_matches_the_reference(kvrl_bin, tmp_path, name):
    make, encode, options, variables, support = RESET_CASES[name]
    ours = variables(kvrl_resets(kvrl_bin, tmp_path, name, RESETS, seed=11, options=options))
    theirs = variables(reference_resets(make(), RESETS, seed=11, encode=encode))
    assert ours.shape == theirs.shape
    # The reference's own sample checks the documented support written above.
    assert_within_support(name, "reference", theirs, support)
    assert_within_support(name, "kvrl", ours, support)
    assert_same_moments(name, ours, theirs)


def test_reset_seed_gives_the_same_draws_and_another_seed_others(kvrl_bin, tmp_path):
    first = kvrl_resets(kvrl_bin, tmp_path, "CartPole-v1", 16, seed=3)
    assert np.array_equal(first, kvrl_resets(kvrl_bin, tmp_path, "CartPole-v1", 16, seed=3))
    assert not np.any(np.all(first == kvrl_resets(kvrl_bin, tmp_path, "CartPole-v1", 16, seed=4), axis=1))
    assert len(np.unique(first, axis=0)) == 16, "every environment must get its own reset draw"


@pytest.mark.parametrize("payload, message", [
    ({"name": "CartPole-v1", "resets": 0}, "input['resets'] must be an int in [1, 100000]"),
    ({"name": "CartPole-v1", "resets": 2.5}, "input['resets'] must be an int in [1, 100000]"),
    ({"name": "CartPole-v1", "resets": 4, "seed": "x"}, "input['seed'] must be an int (the reset seed)"),
    ({"name": "CartPole-v1", "resets": 4, "actions": torch.zeros(1, 1)},
     "input['actions'] is not allowed with input['resets'] (which draws initial observations from kvrl's "
     "own reset; allowed: name, plugin, options, observe, resets, seed, gym_setup, gym_wrappers)"),
    ({"name": "CartPole-v1", "resets": 4, "state": torch.zeros(4, dtype=torch.float64)},
     "input['state'] is not allowed with input['resets']"),
])
def test_a_bad_reset_request_names_the_key(kvrl_bin, tmp_path, payload, message):
    torch.save(payload, tmp_path / "in.pt")
    result = subprocess.run([kvrl_bin, "env-rollout", str(tmp_path / "in.pt"), str(tmp_path / "out.pt")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr


# Terminal branches ------------------------------------------------------------------------


def reset_reference(name, seed):
    env = gym.make(name)
    initial, _ = env.reset(seed=seed)
    return env, initial, np.array(env.unwrapped.state, dtype=np.float64)


def run_policy(env, obs, policy):
    """Runs `policy(observation)` on the reference from `obs` to the episode's end; the
    actions for kvrl and the reference's (observations, rewards, terminated, truncated)."""
    actions, observations, rewards, terminated, truncated = [], [], [], [], []
    while True:
        action = policy(obs)
        actions.append(np.atleast_1d(np.asarray(action, dtype=np.float32)))
        obs, reward, term, trunc, _ = env.step(action)
        observations.append(np.asarray(obs, dtype=np.float32))
        rewards.append(float(reward))
        terminated.append(bool(term))
        truncated.append(bool(trunc))
        if term or trunc:
            break
    return actions, (np.stack(observations), np.array(rewards), np.array(terminated), np.array(truncated))


@pytest.mark.parametrize("seed", range(3))
def test_mountain_car_reaches_the_goal_like_gymnasium(kvrl_bin, tmp_path, seed):
    env, initial, state = reset_reference("MountainCar-v0", seed)
    # Pumping energy, push the way the car moves: it reaches the flag in 116-124 of 200 steps.
    actions, reference = run_policy(env, initial, lambda obs: 2 if obs[1] >= 0 else 0)
    observations, rewards, terminated, truncated = reference
    assert terminated[-1] and not truncated[-1] and len(rewards) < 200, "the policy should reach the goal"
    assert observations[-1][0] >= 0.5
    ours = kvrl_rollout(kvrl_bin, tmp_path, "MountainCar-v0", state, actions)
    assert_same(ours, reference, np.asarray(initial, dtype=np.float32))


def test_mountain_car_stops_at_the_left_wall_like_gymnasium(kvrl_bin, tmp_path):
    # From seed 2 the pumping policy's first swing back hits the wall (position -1.2,
    # velocity zeroed) before it climbs to the goal.
    env, initial, state = reset_reference("MountainCar-v0", 2)
    actions, reference = run_policy(env, initial, lambda obs: 2 if obs[1] >= 0 else 0)
    observations = reference[0]
    assert np.any((observations[:, 0] == np.float32(-1.2)) & (observations[:, 1] == 0)), "never hit the wall"
    assert reference[2][-1], "the policy should reach the goal"
    ours = kvrl_rollout(kvrl_bin, tmp_path, "MountainCar-v0", state, actions)
    assert_same(ours, reference, np.asarray(initial, dtype=np.float32))


@pytest.mark.parametrize("seed", range(3))
def test_acrobot_swings_up_like_gymnasium(kvrl_bin, tmp_path, seed):
    env, initial, state = reset_reference("Acrobot-v1", seed)
    # Torque the way the second joint turns: the tip clears the bar in 65-122 of 500 steps.
    actions, reference = run_policy(env, initial, lambda obs: 2 if obs[5] > 0 else 0)
    observations, rewards, terminated, truncated = reference
    assert terminated[-1] and not truncated[-1] and len(rewards) < 500, "the policy should swing up"
    assert rewards[-1] == 0.0 and np.all(rewards[:-1] == -1.0)
    ours = kvrl_rollout(kvrl_bin, tmp_path, "Acrobot-v1", state, actions)
    assert_same(ours, reference, np.asarray(initial, dtype=np.float32))


@pytest.mark.parametrize("seed", range(2))
def test_pendulum_runs_its_full_time_limit_like_gymnasium(kvrl_bin, tmp_path, seed):
    env, initial, state = reset_reference("Pendulum-v1", seed)
    # Full torque the way it turns: it spins up to the speed cap (8) and over the top, so
    # the angle leaves [-pi, pi] and the cost's angle_normalize wraps it.
    actions, reference = run_policy(env, initial,
                                    lambda obs: np.array([2.0 if obs[2] >= 0 else -2.0], dtype=np.float32))
    observations, rewards, terminated, truncated = reference
    assert len(rewards) == 200 and truncated[-1] and not np.any(terminated), "Pendulum ends by its time limit"
    assert np.any(np.abs(observations[:, 2]) == np.float32(8.0)), "the policy should reach the speed cap"
    assert abs(env.unwrapped.state[0]) > 2 * math.pi, "the policy should spin the pendulum over the top"
    ours = kvrl_rollout(kvrl_bin, tmp_path, "Pendulum-v1", state, actions)
    assert_same(ours, reference, np.asarray(initial, dtype=np.float32))


def test_bad_environment_name_lists_the_built_ins(kvrl_bin, tmp_path):
    torch.save({"name": "CartPole-v0", "state": torch.zeros(4), "actions": torch.zeros(1, 1)}, tmp_path / "in.pt")
    result = subprocess.run([kvrl_bin, "env-rollout", str(tmp_path / "in.pt"), str(tmp_path / "out.pt")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "unknown environment 'CartPole-v0' (built in: Acrobot-v1, Ant-v5, CartPole-v1," in result.stderr


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
