"""Running `kvrl env-rollout` and a reference side by side: the helpers the environment
conformance suites share."""
import math
import subprocess

import numpy as np
import torch

# Reset distributions are compared within this many standard errors. Fixed seeds make each
# sample deterministic. 5 standard errors (a false alarm ~6e-7 per comparison) leaves
# kvrl's resets (at most 1.8 off) well clear of failing, while the broken resets tried
# missed by 8 to 140 (docs/testing.md).
SIGMAS = 5.0


def kvrl_rollout(kvrl_bin, tmp_path, name, state, actions, options=None, states=None):
    payload = {"name": name, "state": torch.as_tensor(np.asarray(state, dtype=np.float64)),
               "actions": torch.as_tensor(np.asarray(actions, dtype=np.float32))}
    if states is not None:
        payload["states"] = torch.as_tensor(np.asarray(states, dtype=np.float64))
    return env_rollout(kvrl_bin, tmp_path, payload, options)


def env_rollout(kvrl_bin, tmp_path, payload, options=None):
    """Runs `kvrl env-rollout` on `payload` (with `options` when given); returns its output."""
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


def kvrl_resets(kvrl_bin, tmp_path, name, n, seed, options=None):
    output = env_rollout(kvrl_bin, tmp_path, {"name": name, "resets": n, "seed": seed}, options)
    return output["observations"].numpy().astype(np.float64)


def reference_resets(env, n, seed, encode=np.asarray):
    """n initial observations: one seeded reset, then the reference's own RNG runs on."""
    first, _ = env.reset(seed=seed)
    rows = [first] + [env.reset()[0] for _ in range(n - 1)]
    return np.stack([np.asarray(encode(obs), dtype=np.float32).reshape(-1) for obs in rows]).astype(np.float64)


def moments_with_errors(x):
    """Per-column mean and std, and their standard errors (the std's from the fourth moment)."""
    n = x.shape[0]
    mean, std = x.mean(0), x.std(0, ddof=1)
    fourth = ((x - mean) ** 4).mean(0)
    variance_se = np.sqrt(np.maximum(fourth - std ** 4, 0.0) / n)
    std_se = np.divide(variance_se, 2 * std, out=np.zeros_like(std), where=std > 0)
    return mean, std, std / math.sqrt(n), std_se


def assert_same_moments(name, ours, theirs):
    """Per-column means and stds of two samples agree within SIGMAS standard errors."""
    our_mean, our_std, our_mean_se, our_std_se = moments_with_errors(ours)
    mean, std, mean_se, std_se = moments_with_errors(theirs)
    # Independent samples: the difference's standard error adds in quadrature. A column
    # that the reference never randomises (MountainCar's velocity) must not vary in kvrl.
    mean_tolerance = SIGMAS * np.hypot(our_mean_se, mean_se) + 1e-12
    std_tolerance = SIGMAS * np.hypot(our_std_se, std_se) + 1e-12
    assert np.all(np.abs(our_mean - mean) <= mean_tolerance), (
        f"{name} reset means: kvrl {our_mean}, reference {mean}, tolerance {mean_tolerance}")
    assert np.all(np.abs(our_std - std) <= std_tolerance), (
        f"{name} reset stds: kvrl {our_std}, reference {std}, tolerance {std_tolerance}")
