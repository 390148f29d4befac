"""Conformance of kvrl's C++ TransformerModule with TorchRL's reference module.

Random configs, weights and reset patterns go through both the reference (PyPI
torchrl-nightly) and `kvrl transformer-eval`; the window path and the cached-step path
must agree within the dtype's tolerance. At realistic sizes (hidden up to 256, T up to
300, batch up to 32) the window's parameter gradients must agree too (1e-5 relative to
each parameter's largest gradient), and a program of segments takes the cached step
through every restart path (batch size, in-place and silent weight changes,
mark_weight_update, reset_cache, an autocast dtype change) against the reference.
"""
import pytest
import torch
from tensordict import TensorDict
from torchrl.modules import TransformerModule, set_recurrent_mode

TOLERANCE = {"float32": 1e-5, "float64": 1e-10, "bfloat16": 5e-2}
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


def build_reference(config, seed, dtype=torch.float32):
    torch.manual_seed(seed)
    reference = TransformerModule(**config, in_key="observation", out_key="embed")
    with torch.no_grad():  # move the norms off their ones/zeros init so they matter
        for name, parameter in reference.named_parameters():
            if "norm" in name:
                parameter.add_(0.3 * torch.randn_like(parameter))
    return reference.to(dtype)


def random_case(seed, dtype_name, aligned):
    generator = torch.Generator().manual_seed(seed)

    def pick(*choices):
        return choices[int(torch.randint(len(choices), (1,), generator=generator))]

    num_heads = pick(1, 2, 4)
    config = dict(
        input_size=pick(1, 3, 6),
        hidden_size=num_heads * pick(2, 4, 8),
        num_layers=pick(1, 2, 3),
        num_heads=num_heads,
        max_seq_len=pick(8, 13, 24),
        dim_feedforward=pick(None, 7, 32),
    )
    reference = build_reference(config, seed, DTYPES[dtype_name])
    batch = pick(1, 2, 4)
    time = min(config["max_seq_len"], pick(5, 8, 13))
    features = torch.randn(batch, time, config["input_size"], generator=generator)
    is_init = torch.rand(batch, time, generator=generator) < 0.2
    is_init[:, 0] = aligned
    payload = {
        "config": config,
        "state_dict": reference.state_dict(),
        "features": features,
        "is_init": is_init,
        "dtype": dtype_name,
    }
    return reference, payload


def reference_outputs(module, features, is_init):
    features = features.to(next(module.parameters()).dtype)
    batch, time = is_init.shape
    window = None
    if bool(is_init[:, 0].all()):
        with set_recurrent_mode(True), torch.no_grad():
            td = TensorDict({"observation": features, "is_init": is_init.unsqueeze(-1)}, [batch, time])
            window = module(td)["embed"]
    module.reset_cache()
    steps = []
    with torch.no_grad():
        for t in range(time):
            td = TensorDict({"observation": features[:, t], "is_init": is_init[:, t, None]}, [batch])
            steps.append(module(td)["embed"])
    return window, torch.stack(steps, 1)


@pytest.mark.parametrize("dtype_name", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("seed", range(6))
def test_window_and_steps_match_the_reference(transformer_eval, seed, dtype_name):
    reference, payload = random_case(seed, dtype_name, aligned=seed % 3 != 2)
    expected_window, expected_steps = reference_outputs(reference, payload["features"], payload["is_init"])
    returncode, stderr, output = transformer_eval(payload)
    assert returncode == 0, stderr
    tolerance = TOLERANCE[dtype_name]
    assert output["steps"].dtype == DTYPES[dtype_name]
    torch.testing.assert_close(output["steps"].double(), expected_steps.double(), rtol=0, atol=tolerance)
    if expected_window is None:
        assert "window" not in output
    else:
        torch.testing.assert_close(output["window"].double(), expected_window.double(), rtol=0, atol=tolerance)


def test_state_dict_saved_by_cpp_loads_into_the_reference(transformer_eval):
    reference, payload = random_case(11, "float32", aligned=True)
    returncode, stderr, output = transformer_eval(payload)
    assert returncode == 0, stderr
    fresh, _ = random_case(12, "float32", aligned=True)
    fresh = TransformerModule(**payload["config"], in_key="observation", out_key="embed")
    fresh.load_state_dict(output["state_dict"], strict=True)
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(fresh.state_dict()[name], value, rtol=0, atol=0)


def test_backbone_state_dict_is_accepted(transformer_eval):
    reference, payload = random_case(3, "float32", aligned=True)
    payload["state_dict"] = reference.transformer.state_dict()  # keys without "transformer."
    expected_window, _ = reference_outputs(reference, payload["features"], payload["is_init"])
    returncode, stderr, output = transformer_eval(payload)
    assert returncode == 0, stderr
    torch.testing.assert_close(output["window"], expected_window, rtol=0, atol=1e-5)


def malformed(payload, **changes):
    broken = dict(payload)
    for key, value in changes.items():
        if value is None:
            broken.pop(key)
        else:
            broken[key] = value
    return broken


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"features": None}, "input has no key 'features'"),
        ({"is_init": torch.ones(2, 3)}, "input['is_init'] must be a bool tensor"),
        ({"dtype": "float16"}, "dtype 'float16' is not supported: use float32, float64 or bfloat16"),
        ({"features": torch.ones(2, 3, 99)}, "input['features'] must be a float tensor [B, T, input_size="),
        ({"config": {"input_size": 3}}, "input['config'] has no key 'hidden_size'"),
        ({"config": {"input_size": 3, "hidden_size": 8, "num_heads": 2, "max_seq_len": 4, "depth": 1}},
         "input['config'] has unknown key 'depth'"),
        ({"state_dict": {"transformer.in_proj.weight": torch.ones(1)}}, "missing keys"),
        ({"program": [{"before": "explode"}]},
         "input['program'][0]['before'] has unknown action 'explode' (allowed: reset_cache, mark_weight_update"),
        ({"program": [{"before": "load_state_dict"}]}, "input['program'][0] has no key 'state_dict'"),
        ({"program": [{"features": torch.ones(2, 3, 99), "is_init": torch.ones(2, 3, dtype=torch.bool)}]},
         "input['program'][0]['features'] must be a float tensor [B, T, input_size="),
        ({"program": [{}]}, "input['program'][0] has no key 'features'"),
        ({"window_grad": torch.ones(1, 2)}, "input['window_grad'] must be a float tensor [B, T, hidden_size="),
    ],
)
def test_malformed_input_names_the_key(transformer_eval, changes, message):
    _, payload = random_case(0, "float32", aligned=True)
    returncode, stderr, _ = transformer_eval(malformed(payload, **changes))
    assert returncode == 2, stderr
    assert message in stderr


def test_a_file_that_is_not_a_torch_archive_is_rejected(kvrl_bin, tmp_path):
    import subprocess

    bogus = tmp_path / "bogus.pt"
    bogus.write_bytes(b"not a zip archive")
    result = subprocess.run([kvrl_bin, "transformer-eval", str(bogus), str(tmp_path / "o.pt")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "is not a torch.save archive" in result.stderr


def test_a_pickled_callable_is_refused_without_running_it(kvrl_bin, tmp_path):
    import os
    import subprocess

    marker = tmp_path / "ran"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    payload = tmp_path / "exploit.pt"
    torch.save({"config": Exploit()}, payload)
    result = subprocess.run([kvrl_bin, "transformer-eval", str(payload), str(tmp_path / "o.pt")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "is not allowed" in result.stderr
    assert not marker.exists()


# Realistic sizes: attention over many chunks, long windows, wide batches. Each case is
# (input_size, hidden_size, num_heads, num_layers, max_seq_len, batch, time, init_rate).
REALISTIC_CASES = {
    "hidden256_T300_B8": (17, 256, 8, 2, 320, 8, 300, 0.0),
    "hidden128_T300_B32_packed": (6, 128, 4, 3, 300, 32, 300, 0.02),
    "hidden64_T257_B32_short_episodes": (4, 64, 2, 1, 300, 32, 257, 0.15),
}


def episode_inputs(generator, batch, time, input_size, init_rate, aligned=True):
    features = torch.randn(batch, time, input_size, generator=generator)
    is_init = torch.rand(batch, time, generator=generator) < init_rate
    is_init[:, 0] = aligned
    return features, is_init


def reference_window_gradients(module, features, is_init, upstream):
    module.zero_grad()
    batch, time = is_init.shape
    with set_recurrent_mode(True):
        td = TensorDict({"observation": features, "is_init": is_init.unsqueeze(-1)}, [batch, time])
        (module(td)["embed"] * upstream).sum().backward()
    return {name: parameter.grad.clone() for name, parameter in module.named_parameters()}


def assert_gradients_close(ours, reference, relative):
    assert set(ours) == set(reference)
    for name, expected in reference.items():
        scale = expected.abs().max().item()
        error = (ours[name] - expected).abs().max().item()
        assert error <= relative * max(scale, 1e-12), f"{name}: max error {error:.3g} against scale {scale:.3g}"


def check_realistic_case(transformer_eval, seed, input_size, hidden, heads, layers, max_seq_len, batch, time,
                         init_rate):
    config = dict(input_size=input_size, hidden_size=hidden, num_layers=layers, num_heads=heads,
                  max_seq_len=max_seq_len, dim_feedforward=None)
    reference = build_reference(config, seed)
    generator = torch.Generator().manual_seed(seed)
    features, is_init = episode_inputs(generator, batch, time, input_size, init_rate)
    upstream = torch.randn(batch, time, hidden, generator=generator)
    expected_window, expected_steps = reference_outputs(reference, features, is_init)
    expected_gradients = reference_window_gradients(reference, features, is_init, upstream)
    payload = {"config": config, "state_dict": reference.state_dict(), "features": features,
               "is_init": is_init, "dtype": "float32", "window_grad": upstream}
    returncode, stderr, output = transformer_eval(payload)
    assert returncode == 0, stderr
    torch.testing.assert_close(output["window"], expected_window, rtol=0, atol=1e-5)
    torch.testing.assert_close(output["steps"], expected_steps, rtol=0, atol=1e-5)
    assert_gradients_close(output["window_grads"], expected_gradients, relative=1e-5)


@pytest.mark.parametrize("name", sorted(REALISTIC_CASES))
def test_realistic_sizes_and_gradients_match_the_reference(transformer_eval, name):
    check_realistic_case(transformer_eval, 7, *REALISTIC_CASES[name])


@pytest.mark.parametrize("seed", range(100, 104))
def test_randomised_sizes_and_gradients_match_the_reference(transformer_eval, seed):
    generator = torch.Generator().manual_seed(seed)

    def between(low, high):
        return int(torch.randint(low, high + 1, (1,), generator=generator))

    heads = (1, 2, 4, 8)[between(0, 3)]
    hidden = heads * (8, 16, 32)[between(0, 2)]
    time = between(20, 300)
    check_realistic_case(transformer_eval, seed, between(1, 24), hidden, heads, between(1, 3), between(time, 300),
                         between(1, 32), time, (0.0, 0.01, 0.05, 0.2)[between(0, 3)])


def perturbed_state_dict(module, seed, scale=0.05):
    generator = torch.Generator().manual_seed(seed)
    return {name: value + scale * torch.randn(value.shape, generator=generator, dtype=value.dtype)
            for name, value in module.state_dict().items()}


def run_reference_program(module, program):
    """The reference's cached step through each segment, after the segment's actions."""
    outputs = []
    for segment in program:
        actions = segment.get("before", [])
        for action in [actions] if isinstance(actions, str) else actions:
            if action == "reset_cache":
                module.reset_cache()
            elif action == "mark_weight_update":
                module.mark_weight_update()
            elif action == "load_state_dict":
                module.load_state_dict(segment["state_dict"])
            elif action == "assign_data":  # behind the module's back: no version bump
                for name, parameter in module.named_parameters():
                    parameter.data.copy_(segment["state_dict"][name])
        features, is_init = segment["features"], segment["is_init"]
        autocast = segment.get("autocast") == "bfloat16"
        steps = []
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            for t in range(features.shape[1]):
                td = TensorDict({"observation": features[:, t], "is_init": is_init[:, t, None]},
                                [features.shape[0]])
                steps.append(module(td)["embed"])
        outputs.append(torch.stack(steps, 1))
    return outputs


def restart_program(reference, generator, input_size, batch):
    """Segments that exercise every way the cache restarts, or must not."""

    def segment(batch_size, time, init_rate=0.05, **extra):
        features, is_init = episode_inputs(generator, batch_size, time, input_size, init_rate, aligned=False)
        return dict(features=features, is_init=is_init, **extra)

    return [
        segment(batch, 40),  # continues the streams of the first steps mid-episode
        segment(batch + 3, 30),  # batch size change: every stream restarts
        segment(batch + 3, 30, before="load_state_dict", state_dict=perturbed_state_dict(reference, 1)),
        segment(batch + 3, 30, before="assign_data", state_dict=perturbed_state_dict(reference, 2)),  # no restart
        segment(batch + 3, 30, before=["assign_data", "mark_weight_update"],
                state_dict=perturbed_state_dict(reference, 3)),
        segment(batch + 3, 30, before="reset_cache"),
        segment(batch + 3, 30, autocast="bfloat16"),  # cache dtype change: restart
        segment(batch + 3, 30),  # and back to float32
    ]


@pytest.mark.parametrize("seed", range(2))
def test_restart_paths_match_the_reference(transformer_eval, seed):
    config = dict(input_size=5, hidden_size=64, num_layers=2, num_heads=4, max_seq_len=300, dim_feedforward=None)
    reference = build_reference(config, seed)
    generator = torch.Generator().manual_seed(seed)
    batch = 6
    features, is_init = episode_inputs(generator, batch, 50, config["input_size"], 0.05)
    program = restart_program(reference, generator, config["input_size"], batch)
    initial_weights = {name: value.clone() for name, value in reference.state_dict().items()}
    payload = {"config": config, "state_dict": initial_weights, "features": features,
               "is_init": is_init, "dtype": "float32", "program": program}
    _, expected_steps = reference_outputs(reference, features, is_init)
    expected_program = run_reference_program(reference, program)
    returncode, stderr, output = transformer_eval(payload)
    assert returncode == 0, stderr
    torch.testing.assert_close(output["steps"], expected_steps, rtol=0, atol=1e-5)
    assert len(output["program_steps"]) == len(program)
    for index, (ours, expected) in enumerate(zip(output["program_steps"], expected_program)):
        tolerance = TOLERANCE["bfloat16"] if program[index].get("autocast") else 1e-5
        torch.testing.assert_close(ours.double(), expected.double(), rtol=0, atol=tolerance,
                                   msg=lambda message, index=index: f"segment {index}: {message}")


# Each restart decision of restart_program flipped: new weights loaded silently, silent
# weights announced, an announcement or a reset dropped.
FLIPPED_RESTARTS = {2: "assign_data", 3: ["assign_data", "mark_weight_update"], 4: "assign_data", 5: []}


@pytest.mark.parametrize("index", sorted(FLIPPED_RESTARTS))
def test_each_restart_decision_changes_the_outputs(index):
    """A module that restarted where the reference continues, or the other way round,
    would fail test_restart_paths_match_the_reference: the outputs differ well beyond
    its tolerance."""
    config = dict(input_size=5, hidden_size=64, num_layers=2, num_heads=4, max_seq_len=300, dim_feedforward=None)
    reference = build_reference(config, 0)
    initial_weights = {name: value.clone() for name, value in reference.state_dict().items()}
    generator = torch.Generator().manual_seed(0)
    features, is_init = episode_inputs(generator, 6, 50, 5, 0.05)
    program = restart_program(reference, generator, 5, 6)
    flipped = [dict(segment) for segment in program]
    flipped[index]["before"] = FLIPPED_RESTARTS[index]
    outputs = []
    for variant in (program, flipped):
        reference.load_state_dict(initial_weights)
        reference_outputs(reference, features, is_init)
        outputs.append(run_reference_program(reference, variant)[index])
    assert (outputs[0] - outputs[1]).abs().max() > 1e-3
