"""Gymnasium environments that exercise kvrl's bridge (gym:bridge_envs:<id>): spaces of
every supported kind, one that is not supported, one whose step raises, and an image
memory task for the CNN encoder. Importing the
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


class ImageCue(gym.Env):
    """A uint8 [6, 6, 1] image memory task: the first image lights one of four 3x3
    quadrants (the cue), the next `delay` images are dark, and the last one shows a query
    mark in the centre; the action at the query scores 1 if it names the cue's quadrant.
    Only the first image tells the cue, so a policy without memory scores 0.25."""
    observation_space = spaces.Box(0, 255, shape=(6, 6, 1), dtype=np.uint8)
    action_space = spaces.Discrete(4)

    def __init__(self, delay=2):
        self.delay = int(delay)

    def image(self):
        frame = np.zeros((6, 6, 1), dtype=np.uint8)
        if self.t == 0:
            row, column = divmod(self.cue, 2)
            frame[3 * row:3 * row + 3, 3 * column:3 * column + 3] = 255
        elif self.t == self.delay + 1:
            frame[2:4, 2:4] = 128
        return frame

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.cue = int(self.np_random.integers(4))
        return self.image(), {}

    def step(self, action):
        done = self.t == self.delay + 1
        reward = float(done and int(action) == self.cue)
        self.t += 1
        return self.image(), reward, done, False, {}



class GoalOnTheLastStep(gym.Env):
    """Reaches its goal on the fifth step, the last its own time limit allows, and says both
    terminated and truncated, as Gymnasium allows and MiniGrid's environments do."""
    observation_space = spaces.Box(0.0, 5.0, shape=(1,), dtype=np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(1, self.t, dtype=np.float32), float(action), self.t == 5, self.t == 5, {}


def register_late_envs():
    """What env.gym_setup calls: registers LateGrid-v0, as MinAtar's register_envs does its games."""
    gym.register("LateGrid-v0", entry_point=BoxGrid, max_episode_steps=50)


class NegatedObservation(gym.ObservationWrapper):
    """What env.gym_wrappers applies: the observation, negated."""
    def observation(self, observation):
        return -observation


gym.register("BoxGrid-v0", entry_point=BoxGrid, max_episode_steps=50)
gym.register("MultiDiscreteEcho-v0", entry_point=MultiDiscreteEcho)
gym.register("TupleSpace-v0", entry_point=TupleSpace)
gym.register("RaisesInStep-v0", entry_point=RaisesInStep, max_episode_steps=100)
gym.register("ImageCue-v0", entry_point=ImageCue, max_episode_steps=16)
gym.register("GoalOnTheLastStep-v0", entry_point=GoalOnTheLastStep, max_episode_steps=5)
