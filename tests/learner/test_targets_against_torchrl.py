"""The learner's learning targets and PPO loss terms against independent computations.

`learner_targets_eval` (tests/learner/targets_eval.cpp) runs kvrl's own functions on
tensors written here: episodes go through pack_windows as in training, so the bootstrap
choice (terminated: 0; truncated: V(final observation)) and the slot offsets are those of
a real batch. The expected values come from TorchRL's GAE and V-trace estimators, its
ClipPPOLoss, torch.distributions for the policy head's log-probabilities and entropy
(categorical and Gaussian), and a few cases worked by hand.
"""
import math
import os
import subprocess

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torchrl.modules import ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value.functional import generalized_advantage_estimate, vtrace_advantage_estimate

OPTIONS = dict(gamma=0.97, gae_lambda=0.9, reward_scale=1.0, rho_bar=1.0, c_bar=0.9, max_tokens=64)


@pytest.fixture
def targets_eval(tmp_path):
    binary = os.environ.get("KVRL_TARGETS_EVAL")
    if not binary or not os.path.exists(binary):
        pytest.fail("KVRL_TARGETS_EVAL must point at the built learner_targets_eval (ctest sets it)")

    def run(payload):
        torch.save(payload, tmp_path / "in.pt")
        result = subprocess.run([binary, str(tmp_path / "in.pt"), str(tmp_path / "out.pt")],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return torch.load(tmp_path / "out.pt", weights_only=True)

    return run


def episode(rewards, values, terminated, log_rhos=None):
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    log_rhos = torch.zeros_like(rewards) if log_rhos is None else torch.as_tensor(log_rhos, dtype=torch.float32)
    return dict(rewards=rewards, values=torch.as_tensor(values, dtype=torch.float32), terminated=terminated,
                log_rhos=log_rhos)


# --- cases worked by hand -------------------------------------------------------------

def test_gae_by_hand_terminated_and_truncated_bootstrap_differently(targets_eval):
    # gamma 0.5, lambda 1: A_t = sum_k 0.5^k r_{t+k} + 0.5^(L-t) * bootstrap - V_t.
    # Rewards [1, 2], values [0.5, 0.25], final value 4.
    # Terminated: A_1 = 2 - 0.25 = 1.75;  A_0 = 1 + 0.5 * 2 - 0.5 = 1.5.
    # Truncated:  A_1 = 2 + 0.5 * 4 - 0.25 = 3.75;  A_0 = 1 + 0.5 * 2 + 0.25 * 4 - 0.5 = 2.5.
    payload = dict(OPTIONS, gamma=0.5, gae_lambda=1.0,
                   episodes=[episode([1, 2], [0.5, 0.25, 4.0], True), episode([1, 2], [0.5, 0.25, 4.0], False)])
    out = targets_eval(payload)["episodes"]
    torch.testing.assert_close(out["advantages"][0], torch.tensor([1.5, 1.75]))
    torch.testing.assert_close(out["advantages"][1], torch.tensor([2.5, 3.75]))


def test_gae_by_hand_lambda_mixes_td_errors(targets_eval):
    # gamma 1, lambda 0.5, truncated, rewards [1, 1], values [1, 2], final value 3:
    # delta_1 = 1 + 3 - 2 = 2, delta_0 = 1 + 2 - 1 = 2; A_1 = 2, A_0 = 2 + 0.5 * 2 = 3.
    payload = dict(OPTIONS, gamma=1.0, gae_lambda=0.5, episodes=[episode([1, 1], [1, 2, 3], False)])
    torch.testing.assert_close(targets_eval(payload)["episodes"]["advantages"][0], torch.tensor([3.0, 2.0]))


def test_vtrace_by_hand_clips_rho_and_c(targets_eval):
    # One step, terminated, r = 1, V = 0.5, rho = e^1 clipped to rho_bar = 1:
    # vs = V + rho (r - V) = 1; pg advantage = rho (r + 0 - V) = 0.5.
    # Two steps, truncated, gamma 1, rewards [0, 0], values [0, 0], final value 1,
    # log_rhos [log 0.5, log 2] (rho_bar 1, c_bar 0.9): delta_1 = 1 * (0 + 1 - 0) = 1,
    # vs_1 = 1; delta_0 = 0.5 * (0 + 0 - 0) = 0, vs_0 = 0 + 0 + 1 * c_0 (vs_1 - V_1) = 0.5 * 1.
    payload = dict(OPTIONS, gamma=1.0, episodes=[
        episode([1.0], [0.5, 9.0], True, log_rhos=[1.0]),
        episode([0.0, 0.0], [0.0, 0.0, 1.0], False, log_rhos=[math.log(0.5), math.log(2.0)]),
    ])
    out = targets_eval(payload)["episodes"]
    torch.testing.assert_close(out["vtrace_vs"][0], torch.tensor([1.0]))
    torch.testing.assert_close(out["vtrace_pg_advantages"][0], torch.tensor([0.5]))
    torch.testing.assert_close(out["vtrace_vs"][1], torch.tensor([0.5, 1.0]))
    # pg_0 = rho_0 (r_0 + gamma vs_1 - V_0) = 0.5 * 1; pg_1 = 1 * (0 + 1 - 0) = 1.
    torch.testing.assert_close(out["vtrace_pg_advantages"][1], torch.tensor([0.5, 1.0]))


def test_ppo_terms_by_hand(targets_eval):
    # ratio [2, 0.5, 1.1] with eps 0.2; advantages [1, -1, 3]:
    # min(2 * 1, 1.2 * 1) = 1.2; min(0.5 * -1, 0.8 * -1) = -0.8; min(3.3, 3.3) = 3.3 -> policy -(3.7 / 3).
    ratio = torch.tensor([2.0, 0.5, 1.1])
    spec = dict(log_probs=ratio.log(), anchor_log_probs=torch.zeros(3), advantages=torch.tensor([1.0, -1.0, 3.0]),
                returns=torch.tensor([1.0, 2.0, 3.0]), values=torch.tensor([2.0, 2.0, 2.0]),
                old_values=torch.tensor([1.5, 2.0, 2.5]), entropy=torch.tensor([0.3, 0.6, 0.9]),
                mask=torch.tensor([True, True, True]), clip_epsilon=0.2, value_clip=0.0)
    out = targets_eval({"ppo": spec})["ppo"]
    torch.testing.assert_close(out["policy"], torch.tensor(-3.7 / 3))
    torch.testing.assert_close(out["value"], torch.tensor(0.5 * (1 + 0 + 1) / 3))
    torch.testing.assert_close(out["entropy"], torch.tensor(0.6))
    torch.testing.assert_close(out["clip_fraction"], torch.tensor(2 / 3))
    # value clip 0.25 around the old values [1.5, 2, 2.5]: clipped [1.75, 2, 2.25], errors
    # max((2-1)^2, (1.75-1)^2) = 1, 0, max((2-3)^2, (2.25-3)^2) = 1 -> unchanged; the clip
    # binds when the clipped value is further from the return:
    spec.update(old_values=torch.tensor([3.0, 2.0, 1.0]), value_clip=0.25)
    # clipped [2.75, 2, 1.25]: errors max(1, 3.0625), 0, max(1, 3.0625) -> 0.5 * 6.125 / 3.
    torch.testing.assert_close(targets_eval({"ppo": spec})["ppo"]["value"], torch.tensor(0.5 * 6.125 / 3))


# --- against TorchRL ------------------------------------------------------------------

def random_episodes(seed, count=12):
    generator = torch.Generator().manual_seed(seed)
    episodes = []
    for index in range(count):
        length = int(torch.randint(1, 30, (1,), generator=generator))
        episodes.append(episode(torch.randn(length, generator=generator),
                                torch.randn(length + 1, generator=generator),
                                terminated=index % 3 == 0,  # the others truncated or cut mid-episode
                                log_rhos=0.7 * torch.randn(length, generator=generator)))
    return episodes


def torchrl_inputs(spec):
    """TorchRL's [T, 1] layout: next values are the values shifted by one, the final
    observation's value last; done and terminated flags only on the last step."""
    length = spec["rewards"].numel()
    done = torch.zeros(length, 1, dtype=torch.bool)
    done[-1] = True
    terminated = done.clone() if spec["terminated"] else torch.zeros_like(done)
    return dict(state_value=spec["values"][:-1, None], next_state_value=spec["values"][1:, None],
                reward=spec["rewards"][:, None], done=done, terminated=terminated)


@pytest.mark.parametrize("seed", range(3))
def test_gae_matches_torchrl(targets_eval, seed):
    episodes = random_episodes(seed)
    out = targets_eval(dict(OPTIONS, episodes=episodes))["episodes"]
    assert out["rows"] < len(episodes), "the episodes should share rows, as in training"
    every = []
    for spec, ours in zip(episodes, out["advantages"]):
        expected, _ = generalized_advantage_estimate(OPTIONS["gamma"], OPTIONS["gae_lambda"], **torchrl_inputs(spec))
        torch.testing.assert_close(ours, expected[:, 0], rtol=1e-5, atol=1e-5)
        every.append(expected[:, 0])
    every = torch.cat(every)
    normalized = (every - every.mean()) / (every.std() + 1e-8)
    torch.testing.assert_close(torch.cat(list(out["normalized_advantages"])), normalized, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_vtrace_matches_torchrl(targets_eval, seed):
    episodes = random_episodes(seed)
    out = targets_eval(dict(OPTIONS, episodes=episodes))["episodes"]
    for spec, vs, pg in zip(episodes, out["vtrace_vs"], out["vtrace_pg_advantages"]):
        log_pi = spec["log_rhos"][:, None]  # log mu = 0
        advantage, expected_vs = vtrace_advantage_estimate(
            OPTIONS["gamma"], log_pi, torch.zeros_like(log_pi), **torchrl_inputs(spec),
            rho_thresh=OPTIONS["rho_bar"], c_thresh=OPTIONS["c_bar"])
        torch.testing.assert_close(vs, expected_vs[:, 0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(pg, advantage[:, 0], rtol=1e-5, atol=1e-5)


def test_a_truncated_episode_is_not_treated_as_terminated(targets_eval):
    """The same steps, flagged terminated or truncated, must give different targets
    (the checks above would pass a learner that bootstrapped both from 0 only if
    TorchRL did too)."""
    spec = random_episodes(7, count=1)[0]
    spec["values"][-1] = 5.0
    truncated = dict(spec, terminated=False)
    out = targets_eval(dict(OPTIONS, episodes=[spec, truncated]))["episodes"]
    assert (out["advantages"][0] - out["advantages"][1]).abs()[-1] > 1.0
    assert (out["vtrace_vs"][0] - out["vtrace_vs"][1]).abs()[-1] > 1.0


def clip_ppo_loss(clip_epsilon, value_clip):
    actor = ProbabilisticActor(TensorDictModule(torch.nn.Identity(), in_keys=["given_logits"], out_keys=["logits"]),
                               in_keys=["logits"], distribution_class=torch.distributions.Categorical,
                               return_log_prob=True)
    critic = ValueOperator(torch.nn.Identity(), in_keys=["given_value"])
    return ClipPPOLoss(actor, critic, clip_epsilon=clip_epsilon, entropy_coeff=1.0, critic_coeff=1.0,
                       loss_critic_type="l2", normalize_advantage=False, clip_value=value_clip or None)


@pytest.mark.parametrize("value_clip", [0.0, 0.3])
@pytest.mark.parametrize("seed", range(3))
def test_ppo_terms_match_torchrl_clip_ppo_loss(targets_eval, seed, value_clip):
    generator = torch.Generator().manual_seed(seed)
    steps, actions_count, clip_epsilon = 64, 3, 0.2
    logits = torch.randn(steps, actions_count, generator=generator)
    distribution = torch.distributions.Categorical(logits=logits)
    actions = torch.randint(actions_count, (steps,), generator=generator)
    anchor_log_probs = distribution.log_prob(actions) + 0.3 * torch.randn(steps, generator=generator)
    advantages, returns = torch.randn(steps, generator=generator), torch.randn(steps, generator=generator)
    values, old_values = torch.randn(steps, generator=generator), torch.randn(steps, generator=generator)
    loss = clip_ppo_loss(clip_epsilon, value_clip)
    td = TensorDict({"given_logits": logits, "given_value": values[:, None], "action": actions,
                     loss.tensor_keys.sample_log_prob: anchor_log_probs, "advantage": advantages[:, None],
                     "value_target": returns[:, None], "state_value": old_values[:, None]}, [steps])
    expected = loss(td)
    spec = dict(log_probs=distribution.log_prob(actions), anchor_log_probs=anchor_log_probs, advantages=advantages,
                returns=returns, values=values, old_values=old_values, entropy=distribution.entropy(),
                mask=torch.ones(steps, dtype=torch.bool), clip_epsilon=clip_epsilon, value_clip=value_clip)
    ours = targets_eval({"ppo": spec})["ppo"]
    torch.testing.assert_close(ours["policy"], expected["loss_objective"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours["entropy"], expected["entropy"], rtol=1e-5, atol=1e-6)
    # kvrl's value term is 0.5 * MSE (learner.value_coef scales it); TorchRL's l2 is the MSE.
    torch.testing.assert_close(ours["value"], 0.5 * expected["loss_critic"], rtol=1e-5, atol=1e-6)


def test_ppo_terms_ignore_tokens_outside_the_mask(targets_eval):
    generator = torch.Generator().manual_seed(3)
    steps = 40
    spec = {key: torch.randn(steps, generator=generator)
            for key in ("log_probs", "anchor_log_probs", "advantages", "returns", "values", "old_values", "entropy")}
    mask = torch.rand(steps, generator=generator) < 0.5
    spec.update(mask=mask, clip_epsilon=0.2, value_clip=0.0)
    masked = targets_eval({"ppo": spec})["ppo"]
    garbage = {key: torch.where(mask, value, torch.full_like(value, 1e4)) if key != "mask" and torch.is_tensor(value)
               else value for key, value in spec.items()}
    kept = {key: value[mask] if torch.is_tensor(value) else value for key, value in spec.items()}
    for variant in (garbage, kept):
        out = targets_eval({"ppo": variant})["ppo"]
        for term in ("policy", "value", "entropy"):
            torch.testing.assert_close(out[term], masked[term], rtol=1e-6, atol=1e-6)


# --- the policy head's distributions ----------------------------------------------------

@pytest.mark.parametrize("seed", range(2))
def test_categorical_head_matches_torch_distributions(targets_eval, seed):
    generator = torch.Generator().manual_seed(seed)
    logits = 2 * torch.randn(50, 4, generator=generator)
    actions = torch.randint(4, (50, 1), generator=generator).float()
    out = targets_eval({"policy_head": dict(discrete=True, policy=logits, actions=actions)})["policy_head"]
    expected = torch.distributions.Categorical(logits=logits)
    torch.testing.assert_close(out["log_probs"], expected.log_prob(actions[:, 0].long()), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out["entropy"], expected.entropy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", range(2))
def test_gaussian_head_matches_torch_distributions(targets_eval, seed):
    generator = torch.Generator().manual_seed(seed)
    mean = torch.randn(50, 3, generator=generator)
    log_std = torch.tensor([-1.0, 0.0, 0.7])
    actions = mean + torch.randn(50, 3, generator=generator)
    out = targets_eval({"policy_head": dict(discrete=False, policy=mean, actions=actions,
                                            log_std=log_std)})["policy_head"]
    expected = torch.distributions.Independent(torch.distributions.Normal(mean, log_std.exp()), 1)
    torch.testing.assert_close(out["log_probs"], expected.log_prob(actions), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out["entropy"], expected.entropy(), rtol=1e-5, atol=1e-5)
