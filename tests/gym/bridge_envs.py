"""Gymnasium environments that exercise kvrl's bridge (gym:bridge_envs:<id>): spaces of
every supported kind, one that is not supported, and one whose step raises. Importing the
module registers them (gymnasium.make's "module:id" form imports it)."""
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class BoxGrid(gym.Env):
    """A [2, 3] float observation and a [2, 2] action in [-1, 1]: reward is the action's sum
    times the step; the next observation is the action, tiled, plus the step."""
    observation_space = spaces.Box(-10.0, 10.0, shape=(2, 3), dtype=np.float32)
    action_space = spaces.Box(-1.0, 1.0, shape=(2, 2), dtype=np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, size=(2, 3)).astype(np.float32), {}

    def step(self, action):
        self.t += 1
        observation = np.concatenate([action, np.full((2, 1), self.t)], axis=1).astype(np.float32)
        return observation, float(np.sum(action)) * self.t, False, self.t >= 12, {}


class MultiDiscreteEcho(gym.Env):
    """A MultiDiscrete([3, 4]) observation and a MultiDiscrete([2, 3]) action: the next
    observation echoes the action; reward 1 when it matches the observation's components."""
    observation_space = spaces.MultiDiscrete([3, 4])
    action_space = spaces.MultiDiscrete([2, 3])

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.obs = self.np_random.integers([0, 0], [2, 3])
        return self.obs.copy(), {}

    def step(self, action):
        self.t += 1
        reward = float(action[0] == self.obs[0]) + float(action[1] == self.obs[1])
        self.obs = np.array([action[0], action[1]])
        return self.obs.copy(), reward, self.t >= 10, False, {}


class TupleSpace(gym.Env):
    observation_space = spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3)))
    action_space = spaces.Discrete(2)


class RaisesInStep(gym.Env):
    """Steps three times, then raises."""
    observation_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t > 3:
            raise ValueError(f"bridge_envs.RaisesInStep: the sensor failed at step {self.t}")
        return np.zeros(2, dtype=np.float32), 0.0, False, False, {}


gym.register("BoxGrid-v0", entry_point=BoxGrid, max_episode_steps=50)
gym.register("MultiDiscreteEcho-v0", entry_point=MultiDiscreteEcho)
gym.register("TupleSpace-v0", entry_point=TupleSpace)
gym.register("RaisesInStep-v0", entry_point=RaisesInStep, max_episode_steps=100)
