"""Learning regression guard: PPO on CartPole-v1 with the main job's config, 1 learner
and 2 actors, fixed seed, 300k env steps. The issue's target (mean return >= 450) is not
reliably reached yet (447 at this budget with seed 1, 421 and 487 at 400k with seeds 2
and 3: docs/training.md); this guards what is reached,
so a change that breaks learning fails here."""
import json
import os
import subprocess

KVRL = os.environ.get("KVRL_BIN")
CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "cartpole_ppo.yaml")


def test_ppo_improves_cartpole_well_beyond_random(tmp_path):
    result = subprocess.run(
        ["mpiexec", "--oversubscribe", "--allow-run-as-root", "-np", "3", KVRL, "train", CONFIG, f"run.dir={tmp_path}",
         "run.total_env_steps=300000"],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, OMPI_MCA_btl="self,vader"))
    assert result.returncode == 0, result.stderr[-3000:]
    learner = json.load(open(tmp_path / "rank0.json"))
    # A uniformly random policy averages about 22 on CartPole-v1.
    assert learner["mean_return"] >= 300, learner
