"""The command line (CLI11, launch/main.cpp): help for kvrl and every subcommand, and bad
arguments refused with exit 2, naming themselves and what is allowed."""
import os
import subprocess

import pytest

KVRL = os.environ.get("KVRL_BIN")

SUBCOMMANDS = {
    "train": ["--resume", "CONFIG.yaml", "key=value"],
    "eval": ["CHECKPOINT", "--env", "--episodes", "--seed", "--greedy", "--trace", "--max-steps"],
    "export": ["CHECKPOINT", "OUT.pt"],
    "env-rollout": ["IN.pt", "OUT.pt"],
    "transformer-eval": ["IN.pt", "OUT.pt"],
    "transformer-demo": ["--envs", "--steps", "--seed"],
    "config-reference": [],
    "info": [],
}


def kvrl(*args):
    return subprocess.run([KVRL, *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("asked", [["--help"], ["help"]])
def test_help_lists_every_command(asked):
    result = kvrl(*asked)
    assert result.returncode == 0, result.stderr
    for name in SUBCOMMANDS:
        assert f"  {name} " in result.stdout, name


def test_an_empty_resume_directory_is_refused():
    result = kvrl("train", "x.yaml", "--resume", "")
    assert result.returncode == 2 and "--resume needs a run directory, got ''" in result.stderr, result.stderr


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_each_commands_help_lists_its_arguments(name):
    result = kvrl(name, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(kvrl("--help").stdout.split(f"  {name}", 1)[1].split("\n")[0].strip())
    for argument in SUBCOMMANDS[name]:
        assert argument in result.stdout, (name, argument)


@pytest.mark.parametrize("args,message", [
    (["nonsense"], "unknown command 'nonsense' (the commands are train, actor, eval, export,"),
    ([], "A subcommand is required (the commands are train,"),
    (["eval", "x.pt", "--sed", "1"], "unknown argument '--sed' (kvrl eval takes CHECKPOINT, --env, --episodes, "
                                    "--seed, --greedy"),
    (["eval"], "checkpoint is required (kvrl eval takes CHECKPOINT"),
    (["export", "a.pt"], "(kvrl export takes CHECKPOINT OUT.pt"),
    (["transformer-demo", "--envs", "0"], "--envs '0' must be an integer in [1, 65536]"),
    (["transformer-demo", "--steps", "257"], "--steps '257' must be an integer in [1, 256]"),
    (["transformer-demo", "--stepz", "3"], "unknown argument '--stepz' (kvrl transformer-demo takes --envs, --steps"),
    (["train"], "train needs a config file"),
])
def test_bad_arguments_are_refused_naming_themselves_and_what_is_allowed(args, message):
    result = kvrl(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr, result.stderr
