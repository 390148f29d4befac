"""Shared fixtures: the kvrl binary under test and a runner for transformer-eval."""
import os
import subprocess

import pytest
import torch


@pytest.fixture(scope="session")
def kvrl_bin():
    path = os.environ.get("KVRL_BIN")
    if not path or not os.path.exists(path):
        pytest.fail("KVRL_BIN must point at the built kvrl executable (ctest sets it)")
    return path


@pytest.fixture
def transformer_eval(kvrl_bin, tmp_path):
    """Runs `kvrl transformer-eval` on a payload; returns (returncode, stderr, output)."""

    def run(payload):
        in_path, out_path = tmp_path / "in.pt", tmp_path / "out.pt"
        torch.save(payload, in_path)
        result = subprocess.run(
            [kvrl_bin, "transformer-eval", str(in_path), str(out_path)],
            capture_output=True, text=True, timeout=120,
        )
        output = torch.load(out_path, weights_only=True) if result.returncode == 0 else None
        return result.returncode, result.stderr, output

    return run
