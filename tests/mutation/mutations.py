"""The deliberate bugs that tests/mutation/run_mutations.py plants, one at a time.

Each models a mistake that would ruin training without crashing anything: the run goes on,
the loss goes down, and the policy is wrong. `find` must occur exactly once in `file`
(the runner refuses a stale entry, naming it); `catchers` are the CTest tests expected to
go red. The fast tier (run_mutations.FAST_TIER) always runs first; a catcher outside it
runs only if the fast tier stays green.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    id: str
    file: str  # relative to the repository root
    find: str  # exact source text, present exactly once
    replace: str
    bug: str  # the mistake it models, one line
    catchers: tuple[str, ...]  # CTest names expected to fail


MUTATIONS = [
    # --- GAE and V-trace targets (learner/returns.cpp) -----------------------------------
    Mutation(
        id="gae-delta-value-sign",
        file="learner/returns.cpp",
        find="const double delta = rp[t] + gamma * next_value - vp[t];",
        replace="const double delta = rp[t] + gamma * next_value + vp[t];",
        bug="GAE's TD error adds V(s_t) instead of subtracting it",
        catchers=("learner_test", "learner_targets"),
    ),
    Mutation(
        id="gae-lambda-dropped",
        file="learner/returns.cpp",
        find="running = delta + gamma * lambda * running;",
        replace="running = delta + gamma * running;",
        bug="GAE ignores lambda (always lambda = 1)",
        catchers=("learner_test", "learner_targets"),
    ),
    Mutation(
        id="gae-next-value-not-advanced",
        file="learner/returns.cpp",
        find="ap[t] = static_cast<float>(running);\n    next_value = vp[t];",
        replace="ap[t] = static_cast<float>(running);",
        bug="every GAE step bootstraps from the episode's final value instead of V(s_t+1)",
        catchers=("learner_test", "learner_targets"),
    ),
    Mutation(
        id="vtrace-rho-unclipped",
        file="learner/returns.cpp",
        find="const double clipped_rho = std::min(rho_bar, rho);",
        replace="const double clipped_rho = rho;",
        bug="V-trace importance weights are not clipped at rho_bar",
        catchers=("learner_test", "learner_targets"),
    ),
    Mutation(
        id="vtrace-c-unclipped",
        file="learner/returns.cpp",
        find="const double c = std::min(c_bar, rho);",
        replace="const double c = rho;",
        bug="V-trace trace coefficients c_t are not clipped at c_bar",
        catchers=("learner_test", "learner_targets"),
    ),
    Mutation(
        id="vtrace-pg-bootstraps-from-value",
        file="learner/returns.cpp",
        find="pg[t] = static_cast<float>(clipped_rho * (rp[t] + gamma * next_vs - vp[t]));",
        replace="pg[t] = static_cast<float>(clipped_rho * (rp[t] + gamma * next_value - vp[t]));",
        bug="V-trace policy-gradient advantage uses V(s_t+1) instead of v_s(t+1)",
        catchers=("learner_test", "learner_targets"),
    ),
    # --- Bootstrapping and losses (learner/policy_losses.cpp, learner.cpp) ----------------
    Mutation(
        id="ppo-bootstrap-cases-swapped",
        file="learner/policy_losses.cpp",
        find="const double bootstrap = slot.terminated ? 0.0 : row_values",
        replace="const double bootstrap = !slot.terminated ? 0.0 : row_values",
        bug="PPO bootstraps a terminated episode from V(final obs) and a truncated one from 0",
        catchers=("learner_test", "learner_targets", "learning_cartpole_mpi"),
    ),
    Mutation(
        id="vtrace-bootstrap-from-last-step",
        file="learner/policy_losses.cpp",
        find="host_values[position][slot->offset + slot->length].item<double>()",
        replace="host_values[position][slot->offset + slot->length - 1].item<double>()",
        bug="V-trace bootstraps a truncated episode from its last step's value, not the final observation's",
        catchers=("learner_test", "learner_targets"),
    ),
    Mutation(
        id="ppo-clip-takes-max",
        file="learner/policy_losses.cpp",
        find="at::Tensor surrogate =\n      at::min(",
        replace="at::Tensor surrogate =\n      at::max(",
        bug="PPO's clipped surrogate takes the optimistic max instead of the pessimistic min",
        catchers=("learner_test", "learner_targets", "learning_cartpole_mpi"),
    ),
    Mutation(
        id="ppo-ratio-inverted",
        file="learner/policy_losses.cpp",
        find="const at::Tensor ratio = log_ratio.exp();",
        replace="const at::Tensor ratio = (-log_ratio).exp();",
        bug="PPO's ratio is pi_old / pi instead of pi / pi_old",
        catchers=("learner_test", "learner_targets", "learning_cartpole_mpi"),
    ),
    Mutation(
        id="entropy-bonus-sign",
        file="learner/learner.cpp",
        find="- stats.entropy_coef * entropy;",
        replace="+ stats.entropy_coef * entropy;",
        bug="the entropy term penalises exploration instead of rewarding it",
        catchers=("learner_test",),
    ),
    Mutation(
        id="ppo-returns-without-values",
        file="learner/learner.cpp",
        find="targets.returns = advantages + values;",
        replace="targets.returns = advantages;",
        bug="the value target is the advantage, not advantage + V (returns)",
        catchers=("learner_test", "learning_cartpole_mpi"),
    ),
    Mutation(
        id="advantage-normalised-over-padding",
        file="learner/policy_losses.cpp",
        find="const at::Tensor weights = step_mask.to(advantages.scalar_type());",
        replace="const at::Tensor weights = at::ones_like(advantages);",
        bug="advantage mean and std include the windows' padding tokens",
        catchers=("learner_test", "learner_targets"),
    ),
    Mutation(
        id="loss-mean-over-padding",
        file="learner/policy_losses.cpp",
        find="return values.masked_select(mask).mean();",
        replace="return (values * mask).mean();",
        bug="losses are averaged over padding too, shrinking them by the packing efficiency",
        catchers=("learner_test", "learner_targets"),
    ),
    # --- Windows the learner trains on (learner/window_batch.cpp) -------------------------
    Mutation(
        id="final-token-starts-new-segment",
        file="learner/window_batch.cpp",
        find="init[base + e.length()] = false;",
        replace="init[base + e.length()] = true;",
        bug="the final observation's token loses the episode's context, so its bootstrap value is wrong",
        catchers=("learner_test",),
    ),
    Mutation(
        id="window-ignores-actor-restarts",
        file="learner/window_batch.cpp",
        find="init[base + t] = (t == 0 && slot.context == 0) || e.is_init[t] != 0;",
        replace="init[base + t] = t == 0 && slot.context == 0;",
        bug="a context restart the actor recorded mid-episode is not a segment start in the window",
        catchers=("learner_test",),
    ),
    # --- Episode masks and positions (common/model/episode_masks.cpp) ---------------------
    Mutation(
        id="mask-sees-next-step",
        file="common/model/episode_masks.cpp",
        find="at::ones({t, t}, is_init.options()).tril();",
        replace="at::ones({t, t}, is_init.options()).tril(/*diagonal=*/1);",
        bug="off-by-one causal mask: each step attends to the next one",
        catchers=("common_test", "conformance"),
    ),
    Mutation(
        id="mask-segment-starts-one-late",
        file="common/model/episode_masks.cpp",
        find="at::Tensor segment = is_init.to(at::kLong).cumsum(/*dim=*/-1);",
        replace="at::Tensor segment = is_init.to(at::kLong).cumsum(/*dim=*/-1) - is_init.to(at::kLong);",
        bug="off-by-one block mask: an episode's first step attends to the previous episode",
        catchers=("common_test", "conformance"),
    ),
    Mutation(
        id="positions-never-restart",
        file="common/model/episode_masks.cpp",
        find="return index - last_reset;",
        replace="return index;",
        bug="window positions count from the row start instead of restarting at is_init",
        catchers=("common_test", "conformance"),
    ),
    # --- Window attention by tiles (common/model/window_attention.cpp) --------------------
    Mutation(
        id="tile-range-one-key-short",
        file="common/model/window_attention.cpp",
        find="rounded_span(ranges[batch * tiles + tile] - begin + 1, query_tile, t)",
        replace="rounded_span(ranges[batch * tiles + tile] - begin, query_tile, t)",
        bug="a tile's key range ends one key early: where rounding does not cover it, its last query loses itself",
        catchers=("common_test",),
    ),
    Mutation(
        id="tile-outputs-in-group-order",
        file="common/model/window_attention.cpp",
        find="      .index_select(0, tile_order_)\n",
        replace="",
        bug="the tiles' outputs are put back in the order of their groups, not of the window",
        catchers=("common_test",),
    ),
    Mutation(
        id="contexts-attend-ahead",
        file="common/model/window_attention.cpp",
        find="/*is_causal=*/true)\n                          .transpose(1, 2)",
        replace="/*is_causal=*/false)\n                          .transpose(1, 2)",
        bug="contexts gathered into their own rows attend without the causal mask: to later steps and padding",
        catchers=("common_test",),
    ),
    # --- The cached step (common/model/transformer_module.cpp, transformer_block.cpp) -----
    Mutation(
        id="step-skips-is-init-restart",
        file="common/model/transformer_module.cpp",
        find="const at::Tensor positions = positions_.masked_fill(init, 0);",
        replace="const at::Tensor positions = positions_;",
        bug="the cached step ignores is_init: a new episode keeps attending to the last one",
        catchers=("common_test", "conformance"),
    ),
    Mutation(
        id="static-step-skips-is-init-restart",
        file="common/model/transformer_module.cpp",
        find="  positions_.masked_fill_(init, 0);\n",
        replace="",
        bug="the static-shape (CUDA graph) step ignores is_init",
        catchers=("common_test",),
    ),
    Mutation(
        id="mark-weight-update-keeps-cache",
        file="common/model/transformer_module.cpp",
        find="void TransformerModule::mark_weight_update() { reset_cache(); }",
        replace="void TransformerModule::mark_weight_update() {}",
        bug="mark_weight_update() keeps keys and values computed with the old weights",
        catchers=("common_test",),
    ),
    Mutation(
        id="in-place-weight-change-unnoticed",
        file="common/model/transformer_module.cpp",
        find="autocast_dtype(device) != cache_dtype_ ||\n         current_weights_version() != weights_version_;",
        replace="autocast_dtype(device) != cache_dtype_;",
        bug="an in-place weight update does not restart the streams' cache",
        catchers=("common_test",),
    ),
    Mutation(
        id="prefill-positions-one-short",
        file="common/model/transformer_module.cpp",
        find="positions_.copy_(lengths);",
        replace="positions_.copy_(lengths - 1);",
        bug="after a context rebuild the next step overwrites the last prefilled slot",
        catchers=("common_test",),
    ),
    Mutation(
        id="cached-step-attention-unscaled",
        file="common/model/transformer_block.cpp",
        find="return attend(h, at::scaled_dot_product_attention(q, keys, values, attn_mask));",
        replace="return attend(h, at::scaled_dot_product_attention(q, keys, values, attn_mask, "
        "/*dropout_p=*/0.0, /*is_causal=*/false, /*scale=*/1.0));",
        bug="the actors' cached step drops the 1/sqrt(head_dim) scale the learner's window uses",
        catchers=("common_test", "conformance"),
    ),
    # --- Flow control, policy lag, weight sync (learner_loop.cpp, actor_loop.cpp) ---------
    Mutation(
        id="credit-not-returned-for-batch",
        file="learner/learner_loop.cpp",
        find="  for (const Episode& e : batch) grant_credit(static_cast<int>(e.actor_rank), e.length());\n",
        replace="",
        bug="the learner never returns the credit of the episodes it trains on",
        catchers=("loops_test",),
    ),
    Mutation(
        id="batch-packed-in-arrival-order",
        file="learner/learner_loop.cpp",
        find="  std::stable_sort(batch.begin(), batch.end(), [](const Episode& a, const Episode& b) {\n",
        replace="  if (batch.empty()) std::stable_sort(batch.begin(), batch.end(), [](const Episode& a, const Episode& b) {\n",
        bug="a batch is packed in the order the actors' messages arrived: synchronous runs are not reproducible",
        catchers=("learning_cartpole_mpi",),
    ),
    Mutation(
        id="actor-never-charges-credit",
        file="actor/actor_loop.cpp",
        find="  *best -= length;\n",
        replace="",
        bug="actors do not charge sent episodes against their credit: no flow control",
        catchers=("loops_test",),
    ),
    Mutation(
        id="policy-lag-off-by-one",
        file="learner/learner_loop.cpp",
        find="policy_version_ - episode.oldest_policy_version() > options_.max_policy_lag;",
        replace="policy_version_ - episode.oldest_policy_version() >= options_.max_policy_lag;",
        bug="episodes exactly max_policy_lag versions old are dropped",
        catchers=("loops_test",),
    ),
    Mutation(
        id="actor-adopts-version-without-weights",
        file="actor/actor_loop.cpp",
        find="  assign_parameters(weights.values, parameters_);\n",
        replace="",
        bug="an actor records the new policy version but keeps acting with the old weights",
        catchers=("loops_test",),
    ),
    Mutation(
        id="actor-context-restart-not-recorded",
        file="actor/actor_loop.cpp",
        find="      std::fill(restart_pending_.begin(), restart_pending_.end(), 1);\n",
        replace="",
        bug="with on_weight_update=restart the restart is not recorded as is_init for the learner",
        catchers=("loops_test", "integration_mpi"),
    ),
    Mutation(
        id="fragment-prefix-one-step-short",
        file="actor/actor_loop.cpp",
        find="const int64_t prefix = std::min(context.kept(), options_.context_reach);",
        replace="const int64_t prefix = std::min(context.kept(), options_.context_reach - 1);",
        bug="a fragment carries one step less of context than its first step attended to, so the learner "
        "computes its sliding-window steps from a shorter history than the actor did",
        catchers=("loops_test",),
    ),
    Mutation(
        id="weights-assigned-without-offset",
        file="common/comm/parameter_vector.cpp",
        find="    offset += p.numel();\n",
        replace="",
        bug="every parameter is filled from the start of the flat weights vector",
        catchers=("common_test", "loops_test"),
    ),
    # --- Wire formats and checksums (common/wire) -----------------------------------------
    Mutation(
        id="crc-byte-swapped",
        file="common/wire/crc32.cpp",
        find="return ~crc;",
        replace="return __builtin_bswap32(~crc);",
        bug="CRC-32 and CRC-32C come out byte-swapped (self-consistent, not the standard value)",
        catchers=("common_test",),
    ),
    Mutation(
        id="codec-terminated-truncated-swapped",
        file="common/wire/episode_codec.cpp",
        find="  take(e.terminated, length);\n  take(e.truncated, length);",
        replace="  take(e.truncated, length);\n  take(e.terminated, length);",
        bug="the decoder swaps terminated and truncated, so the learner bootstraps the wrong case",
        catchers=("common_test",),
    ),
    Mutation(
        id="weights-codec-values-shifted",
        file="common/wire/weights_codec.cpp",
        find="std::memcpy(decoded.values.data(), message.data() + kHeaderBytes,",
        replace="std::memcpy(decoded.values.data(), message.data() + kHeaderBytes + 4,",
        bug="decoded weights are shifted by one float (the checksum becomes the last weight)",
        catchers=("common_test",),
    ),
    # --- Checkpoints (learner/checkpoint.cpp) ---------------------------------------------
    Mutation(
        id="checkpoint-adam-moments-swapped",
        file="learner/checkpoint.cpp",
        find="adam->exp_avg_sq(m.exp_avg_sq.to(m.parameter.device()).clone());",
        replace="adam->exp_avg_sq(m.exp_avg.to(m.parameter.device()).clone());",
        bug="a resumed run restores Adam's second moment from the first",
        catchers=("learner_test",),
    ),
    Mutation(
        id="checkpoint-update-count-not-restored",
        file="learner/checkpoint.cpp",
        find="  learner.restore_update_count(learner_updates);\n",
        replace="",
        bug="a resumed learner restarts its update count (learning-rate schedule, minibatch order)",
        catchers=("learner_test", "reliability_mpi"),
    ),
    # --- Environments (actor/) -------------------------------------------------------------
    Mutation(
        id="cartpole-force-sign",
        file="actor/classic_control.cpp",
        find="const double force = push_right ? kForceMag : -kForceMag;",
        replace="const double force = push_right ? -kForceMag : kForceMag;",
        bug="CartPole pushes left when told to push right",
        catchers=("conformance", "actor_test"),
    ),
    Mutation(
        id="cartpole-one-sided-angle-limit",
        file="actor/classic_control.cpp",
        find="theta < -kThetaThreshold || theta > kThetaThreshold",
        replace="theta > kThetaThreshold",
        bug="CartPole only terminates when the pole falls to one side",
        catchers=("actor_test", "conformance"),
    ),
    Mutation(
        id="time-limit-reported-as-termination",
        file="actor/environment.cpp",
        find="if (limit > 0 && elapsed_steps_ >= limit) result.truncated = true;",
        replace="if (limit > 0 && elapsed_steps_ >= limit) result.terminated = true;",
        bug="hitting the time limit is reported as termination, so it bootstraps from 0",
        catchers=("actor_test", "conformance"),
    ),
    Mutation(
        id="final-observation-after-reset",
        file="actor/vector_env.cpp",
        find="    std::copy(observation.begin(), observation.end(), "
        "final_observations_.begin() + index * obs_size);\n    reset_env(index);",
        replace="    reset_env(index);\n    std::copy(observation.begin(), observation.end(), "
        "final_observations_.begin() + index * obs_size);",
        bug="the final observation is the next episode's first one",
        catchers=("actor_test",),
    ),
    # --- Learner collectives ---------------------------------------------------------------
    Mutation(
        id="overlapped-gradients-summed",
        file="common/comm/mpi_ring_reduction.cpp",
        find="    host_.div_(static_cast<double>(size_));\n",
        replace="",
        bug="the ring all-reduce sums gradients over learners instead of averaging them",
        catchers=("learner_mpi",),
    ),
    Mutation(
        id="reduced-gradients-discarded",
        file="learner/gradient_reducer.cpp",
        find="    unflatten_bucket(flat_[b], buckets_[b], grads);\n",
        replace="",
        bug="each learner steps with its own gradient, not the mean: the learners drift apart",
        catchers=("learner_test", "learner_mpi"),
    ),
    # --- The policy head (common/model/actor_critic.cpp) ----------------------------------
    Mutation(
        id="gaussian-log-prob-log-std-sign",
        file="common/model/actor_critic.cpp",
        find="return (-0.5 * z * z - log_std_ - log_sqrt_2pi).sum(-1);",
        replace="return (-0.5 * z * z + log_std_ - log_sqrt_2pi).sum(-1);",
        bug="a Gaussian policy's log-probability adds log(std) instead of subtracting it",
        catchers=("learner_targets",),
    ),
    # --- Issue #20: normalisation, MuJoCo, the Gymnasium bridge ----------------------------
    Mutation(
        id="actors-act-unnormalized",
        file="common/model/actor_critic.cpp",
        find="const at::Tensor input = trunk_input(observations);\n  const at::Tensor features = stream_ids",
        replace="const at::Tensor input = observations;\n  const at::Tensor features = stream_ids",
        bug="the cached step (the actors') skips the observation normaliser the learner's window applies",
        catchers=("common_test", "learner_test"),
    ),
    Mutation(
        id="cnn-reads-channels-first",
        file="common/model/image_encoder.cpp",
        find="""  const at::Tensor images = observations.reshape({-1, shape[0], shape[1], shape[2]})
                                .permute({0, 3, 1, 2})""",
        replace="""  const at::Tensor images = observations.reshape({-1, shape[2], shape[0], shape[1]})""",
        bug="the CNN reads Gymnasium's height-width-channel images as channels-first: the pixels are scrambled",
        catchers=("common_test",),
    ),
    Mutation(
        id="stream-step-reads-the-first-rows",
        file="common/model/transformer_block.cpp",
        find="return (rows_are_all ? used : used.index_select(0, rows)).to(q.scalar_type());",
        replace="return used.narrow(0, 0, rows.size(0)).to(q.scalar_type());",
        bug="a partial-batch step attends to the cache rows of the first S streams instead of its own streams'",
        catchers=("common_test",),
    ),
    Mutation(
        id="async-restart-forgotten-by-waiting-streams",
        file="actor/actor_loop.cpp",
        find="    restart_pending_[i] = 0;\n  }\n  return init;",
        replace="  }\n  std::fill(restart_pending_.begin(), restart_pending_.end(), 0);\n  return init;",
        bug="one restart flag for all streams, as in lockstep: with asynchronous stepping the first partial step "
        "after a restart clears it for the streams still stepping, whose next step is then not recorded as a "
        "context start",
        catchers=("loops_test",),
    ),
    Mutation(
        id="mujoco-velocities-unclipped",
        file="actor/mujoco_locomotion.cpp",
        find="*out++ = static_cast<float>(std::clamp(data_->qvel[i], -clip, clip));",
        replace="*out++ = static_cast<float>(data_->qvel[i]);",
        bug="Hopper and Walker2d observe their velocities unclipped (Gymnasium v5 clips them to +-10)",
        catchers=("conformance",),
    ),
    Mutation(
        id="gym-multidiscrete-first-component-fastest",
        file="actor/gym/gym_bridge_module.cpp",
        find="for (int64_t part = parts - 1; part >= 0; --part) {",
        replace="for (int64_t part = 0; part < parts; ++part) {",
        bug="the bridge decodes a MultiDiscrete action index with the first component varying fastest",
        catchers=("gym_bridge",),
    ),
]
