"""The Gymnasium bridge in training, under mpiexec: actors step Gymnasium's own vector
environment (gym:<id>) inside their process; a Python exception in an environment ends
the run promptly with exit 5 and the traceback in the rank's log, not a hang."""
import os
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KVRL = os.environ.get("KVRL_BIN")
CONFIGS = os.path.join(HERE, "..", "..", "configs")
ENV = dict(os.environ, OMPI_MCA_btl="self,vader", OMP_NUM_THREADS="1",
           PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
ENVIRONMENT_FAILED = 5  # kTrainEnvironmentFailed (launch/train_command.h)


def train(run_dir, *overrides, timeout=600):
    command = ["mpiexec", "--oversubscribe", "--allow-run-as-root", "-np", "3", KVRL, "train",
               os.path.join(CONFIGS, "cartpole_ppo.yaml"), f"run.dir={run_dir}", *overrides]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=ENV)


def test_cartpole_through_the_bridge_learns(tmp_path):
    result = train(tmp_path, "env.name=gym:CartPole-v1", "run.total_env_steps=100000")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "on 16 x gym:CartPole-v1" in (tmp_path / "rank1.log").read_text()
    final = [line for line in result.stdout.splitlines() if "kvrl train: finished" in line][-1]
    mean_return = float(final.split("mean_return=")[1].split()[0])
    # The native CartPole's run of this config returns about 270 at 100k (docs/training.md).
    assert mean_return >= 150, final


def test_a_python_exception_in_step_ends_the_run_with_its_traceback(tmp_path):
    begin = time.monotonic()
    result = train(tmp_path, "env.name=gym:bridge_envs:RaisesInStep-v0", "run.total_env_steps=100000",
                   "env.num_envs=2", timeout=120)
    assert result.returncode == ENVIRONMENT_FAILED, (result.returncode, result.stderr[-3000:])
    assert time.monotonic() - begin < 60
    assert "failed in its environment: gym:bridge_envs:RaisesInStep-v0 step() raised a Python exception" in \
        result.stderr
    logs = (tmp_path / "rank1.log").read_text() + (tmp_path / "rank2.log").read_text()
    assert "Traceback (most recent call last)" in logs
    assert "ValueError: bridge_envs.RaisesInStep: the sensor failed at step 4" in logs


def test_steps_both_terminated_and_truncated_train_as_terminated(tmp_path):
    # Gymnasium's vector environment reports both flags for the goal reached on the last
    # allowed step; the actor ships it as terminated instead of failing to encode it.
    result = train(tmp_path, "env.name=gym:bridge_envs:GoalOnTheLastStep-v0", "run.total_env_steps=8000",
                   "learner.steps_per_update=1024", "env.num_envs=4", timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "env_steps=" in result.stdout
