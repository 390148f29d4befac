"""Integration tests of `kvrl train` under mpiexec: roles, accounting, weight sync,
learner agreement, a corrupt message, and config errors. Each run is bounded in time."""
import json
import os
import re
import subprocess

import pytest

KVRL = os.environ.get("KVRL_BIN")
CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "cartpole_ppo.yaml")


def mpirun(ranks, *overrides, env=None, timeout=240):
    command = ["mpiexec", "--oversubscribe", "--allow-run-as-root", "-np", str(ranks), KVRL, "train", CONFIG,
               *overrides]
    full_env = dict(os.environ, OMPI_MCA_btl="self,vader", **(env or {}))
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=full_env)


def stats(run_dir, ranks):
    return [json.load(open(os.path.join(run_dir, f"rank{r}.json"))) for r in range(ranks)]


def assert_every_applied_version_is_learner_zeros(learner, actors, minimum_versions):
    """After every weight sync, each actor's parameters hash to learner 0's for that version."""
    synced = learner["weights_synced"]
    assert synced["not_kept"] == 0 and len(synced["versions"]) >= minimum_versions, synced
    assert len(set(synced["versions"].values())) == len(synced["versions"]), "an update left the weights as they were"
    for actor in actors:
        applied = actor["weights_applied"]["versions"]
        assert len(applied) >= 2, actor  # the initial weights and at least one update
        for version, checksum in applied.items():
            assert synced["versions"].get(version) == checksum, (actor["rank"], version, checksum)


def test_one_learner_two_actors_sync_weights_and_account_for_every_episode(tmp_path):
    result = mpirun(3, f"run.dir={tmp_path}", "run.max_updates=6", "learner.steps_per_update=512",
                    "actor.credit_steps=512", "run.total_env_steps=1000000", "learner.threads=2",
                    "actor.on_weight_update=reprefill")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "2 intra-op thread(s) (learner.threads)" in open(tmp_path / "rank0.log").read()
    assert "1 intra-op thread(s) (actor.threads)" in open(tmp_path / "rank1.log").read()
    assert result.stdout.strip().splitlines()[-1].startswith("kvrl train: finished: env_steps=")
    learner, *actors = stats(tmp_path, 3)
    assert learner["updates"] == 6
    for actor in actors:
        assert actor["weight_updates_applied"] >= 1, actor
        assert actor["cache_invalidations"] >= 2, actor  # the initial weights, then at least one update
        # Streams in mid-episode kept their context across the updates (rebuilt, not restarted).
        assert actor["context_steps_rebuilt"] > 0, actor
        assert actor["contexts_restarted"] == 0, actor
    sent = sum(a["episodes_sent"] for a in actors)
    assert sent == learner["episodes_received"]
    assert learner["episodes_received"] == learner["episodes_used"] + sum(learner["dropped"].values())
    assert learner["announced_by"] == {str(a["rank"]): a["episodes_sent"] for a in actors}
    assert os.path.exists(tmp_path / "config.yaml")
    assert_every_applied_version_is_learner_zeros(learner, actors, minimum_versions=7)


def test_restarting_contexts_instead_is_a_config_choice(tmp_path):
    result = mpirun(2, f"run.dir={tmp_path}", "run.max_updates=3", "learner.steps_per_update=512",
                    "actor.credit_steps=512", "run.total_env_steps=1000000", "actor.on_weight_update=restart")
    assert result.returncode == 0, result.stderr[-3000:]
    learner, actor = stats(tmp_path, 2)
    assert actor["weight_updates_applied"] >= 1, actor
    assert actor["context_steps_rebuilt"] == 0, actor
    # Streams in mid-episode restarted, and their episodes say so (is_init inside them), so
    # the learner attends as the actor did; the decoder accepted every one of those episodes.
    # Episodes still queued when the run's last update ends are counted as unused_at_end.
    assert actor["contexts_restarted"] > 0, actor
    assert actor["episodes_sent"] == learner["episodes_received"], (actor, learner)
    rejected = {reason: n for reason, n in learner["dropped"].items() if reason.startswith("malformed")}
    assert rejected == {}, learner
    assert learner["episodes_used"] > 0, learner


def test_asynchronous_stepping_steps_the_ready_streams_and_accounts_for_every_episode(tmp_path):
    """env.stepping=async with step times varying 4x between environments: the policy steps
    whichever streams are ready, episodes still reach the learner whole and decodable."""
    result = mpirun(2, f"run.dir={tmp_path}", "run.max_updates=3", "learner.steps_per_update=512",
                    "actor.credit_steps=512", "run.total_env_steps=1000000", "env.num_envs=4",
                    "env.stepping=async", "env.step_delay_ms=0.2", "env.step_delay_spread=4")
    assert result.returncode == 0, result.stderr[-3000:]
    learner, actor = stats(tmp_path, 2)
    assert actor["partial_policy_steps"] > actor["policy_steps"] / 2, actor
    assert actor["env_steps"] < 4 * actor["policy_steps"], actor
    assert actor["weight_updates_applied"] >= 1, actor
    assert actor["episodes_sent"] == learner["episodes_received"], (actor, learner)
    assert learner["dropped"] == {} or all(not r.startswith("malformed") for r in learner["dropped"]), learner
    assert learner["episodes_used"] > 0, learner


def test_asynchronous_stepping_is_refused_for_gymnasium_environments(tmp_path):
    result = mpirun(2, f"run.dir={tmp_path}", "env.name=gym:CartPole-v1", "env.stepping=async")
    assert result.returncode != 0
    assert ("config key 'env.stepping' = 'async': gym:<id> environments step together through Gymnasium's vector API"
            in result.stderr + result.stdout), result.stderr[-2000:]


@pytest.mark.parametrize("overlap", ["true", "false"])
def test_two_learners_stay_bit_identical(tmp_path, overlap):
    # Buckets of 20 KiB: the model's ~400 KB of gradients go out in many of them.
    result = mpirun(3, f"run.dir={tmp_path}", "learners=2", "run.max_updates=5", "learner.steps_per_update=512",
                    "actor.credit_steps=512", "run.total_env_steps=1000000", "learner.allreduce_bucket_mb=0.02",
                    f"learner.overlap_allreduce={overlap}")
    assert result.returncode == 0, result.stderr[-3000:]
    first, second, actor = stats(tmp_path, 3)
    assert first["updates"] == second["updates"] == 5
    for learner in (first, second):
        buckets = learner["allreduce_buckets"]
        if overlap == "true":
            # Every gradient is produced in backward, so every bucket starts during it.
            assert buckets["started"] > 5 and buckets["during_backward"] == buckets["started"], buckets
        else:
            assert buckets == {"started": 0, "during_backward": 0}, buckets
    assert first["episodes_used"] > 0 and second["episodes_used"] > 0
    assert first["parameter_checksum"] == second["parameter_checksum"]
    assert actor["episodes_sent_to"][0] > 0 and actor["episodes_sent_to"][1] > 0


def test_staged_weight_broadcast_over_mpi_reaches_every_actor(tmp_path):
    # Learner 1 is not in the broadcast (learner 0 and the actors are); weights every update.
    result = mpirun(4, f"run.dir={tmp_path}", "learners=2", "run.max_updates=5", "learner.steps_per_update=512",
                    "actor.credit_steps=512", "run.total_env_steps=1000000", "learner.weight_broadcast=mpi_broadcast")
    assert result.returncode == 0, result.stderr[-3000:]
    first, second, *actors = stats(tmp_path, 4)
    assert first["updates"] == second["updates"] == 5
    assert first["parameter_checksum"] == second["parameter_checksum"]
    for actor in actors:
        assert actor["weight_updates_applied"] >= 1, actor
        assert 1 <= actor["policy_version"] <= 5, actor
    assert_every_applied_version_is_learner_zeros(first, actors, minimum_versions=6)
    assert second["weights_synced"]["versions"] == {}, "only learner 0 sends weights"
    for rank in (0, 2, 3):
        log = open(tmp_path / f"rank{rank}.log").read()
        assert "weights go to the actors by announced MPI_Ibcast broadcasts into staging buffers" in log, rank


def test_nccl_weight_broadcast_without_gpus_is_refused_naming_why(tmp_path):
    result = mpirun(2, f"run.dir={tmp_path}", "learner.weight_broadcast=nccl", "learner.device=cpu",
                    "actor.device=cpu", "actor.credit_steps=4096", timeout=60)
    assert result.returncode == 2, result.stderr[-3000:]
    assert re.search(r"learner\.weight_broadcast=nccl needs learner 0 and every actor on a GPU of its own, but "
                     r"(kvrl was built without NCCL|rank 0 acts or learns on the CPU); use auto, mpi_messages or "
                     r"mpi_broadcast", result.stderr), result.stderr[-3000:]


def test_bf16_autocast_on_both_roles_trains_and_says_so(tmp_path):
    result = mpirun(2, f"run.dir={tmp_path}", "run.max_updates=3", "learner.steps_per_update=512",
                    "actor.credit_steps=512", "run.total_env_steps=1000000", "learner.autocast=bfloat16",
                    "actor.autocast=bfloat16", "actor.on_weight_update=reprefill")
    assert result.returncode == 0, result.stderr[-3000:]
    learner, actor = stats(tmp_path, 2)
    assert learner["updates"] == 3 and learner["skipped_updates"] == 0, learner
    assert actor["weight_updates_applied"] >= 1 and actor["context_steps_rebuilt"] > 0, actor
    assert "the window forward runs under bfloat16 autocast on cpu" in open(tmp_path / "rank0.log").read()
    assert "steps and caches run under bfloat16 autocast on cpu" in open(tmp_path / "rank1.log").read()


def test_a_corrupt_episode_is_dropped_counted_and_the_run_goes_on(tmp_path):
    result = mpirun(2, f"run.dir={tmp_path}", "run.max_updates=4", "learner.steps_per_update=512",
                    "actor.credit_steps=512", "run.total_env_steps=1000000",
                    env={"KVRL_FAULT": "corrupt_episode:1:3"})
    assert result.returncode == 0, result.stderr[-3000:]
    learner, actor = stats(tmp_path, 2)
    assert actor["corrupt_messages_injected"] == 1
    assert learner["dropped"].get("malformed_checksum") == 1
    assert learner["updates"] == 4
    assert "dropped an episode message from rank 1 (checksum)" in open(tmp_path / "rank0.log").read()


def test_an_unknown_key_stops_every_rank_before_work(tmp_path):
    result = mpirun(2, f"run.dir={tmp_path}", "learner.learnig_rate=0.1", timeout=60)
    assert result.returncode == 2
    assert "unknown config key 'learner.learnig_rate'" in result.stderr
    assert not (tmp_path / "rank0.log").exists()


def test_every_bad_key_is_reported_at_once(tmp_path):
    result = mpirun(2, f"run.dir={tmp_path}", "learner.learnig_rate=0.1", "learner.gamma=1.5", "nonsense",
                    timeout=60)
    assert result.returncode == 2
    assert "3 problems in the config:" in result.stderr, result.stderr[-3000:]
    for problem in ("unknown config key 'learner.learnig_rate'",
                    "config key 'learner.gamma' = '1.5': expected a number in [0, 1]",
                    "override 'nonsense' must be key=value"):
        assert problem in result.stderr, problem
    assert result.stderr.count("3 problems in the config") == 1, "more than one rank printed the refusal"
    assert not (tmp_path / "rank0.log").exists()


def test_a_policy_lag_limit_the_weight_sync_cannot_meet_is_refused(tmp_path):
    result = mpirun(2, f"run.dir={tmp_path}", "learner.weight_sync_interval=4", "learner.max_policy_lag=2",
                    timeout=60)
    assert result.returncode == 2
    assert "learner.max_policy_lag (2) must be 0 (keep all) or at least learner.weight_sync_interval - 1 (3)" \
        in result.stderr, result.stderr[-3000:]


def test_a_value_out_of_range_names_the_key(tmp_path):
    result = mpirun(2, f"run.dir={tmp_path}", "learner.gamma=1.5", timeout=60)
    assert result.returncode == 2
    assert "config key 'learner.gamma' = '1.5': expected a number in [0, 1]" in result.stderr


def test_whole_episodes_longer_than_max_seq_len_train_in_segments(tmp_path):
    """Until issue #19 a time limit beyond max_seq_len was refused; now each stream's
    context restarts every max_seq_len - 1 steps, recorded as is_init."""
    result = mpirun(3, f"run.dir={tmp_path}", "model.max_seq_len=8", "run.max_updates=2",
                    "learner.steps_per_update=512", "actor.credit_steps=512", timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    learner, *actors = stats(tmp_path, 3)
    assert all(a["segment_restarts"] > 0 for a in actors), actors
    assert not any(reason.startswith("malformed") for reason in learner["dropped"]), learner["dropped"]


def test_too_few_ranks_says_how_to_launch(tmp_path):
    result = mpirun(1, f"run.dir={tmp_path}", timeout=60)
    assert result.returncode == 2
    assert "launch/kvrl-mpirun -np 3" in result.stderr
