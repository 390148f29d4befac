"""Conformance of kvrl's C++ TransformerModule with TorchRL's reference module.

Random configs, weights and reset patterns go through both the reference (PyPI
torchrl-nightly) and `kvrl transformer-eval`; the window path and the cached-step path
must agree within the dtype's tolerance.
"""
import pytest
import torch
from tensordict import TensorDict
from torchrl.modules import TransformerModule, set_recurrent_mode

TOLERANCE = {"float32": 1e-5, "float64": 1e-10, "bfloat16": 5e-2}
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


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
    torch.manual_seed(seed)
    reference = TransformerModule(**config, in_key="observation", out_key="embed")
    with torch.no_grad():  # move the norms off their ones/zeros init so they matter
        for name, parameter in reference.named_parameters():
            if "norm" in name:
                parameter.add_(0.3 * torch.randn_like(parameter))
    reference = reference.to(DTYPES[dtype_name])
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
