// A learner: turns batches of complete episodes into updates of the ActorCritic, with
// PPO (clipped surrogate, GAE, entropy bonus, optional value clipping, several epochs) or
// V-trace actor-critic (IMPALA), Adam, gradient-norm clipping and a learning-rate
// schedule. Gradients are averaged over the learners through a Communicator, so learners
// that start from the same weights stay bit-identical.
#pragma once

#include <torch/optim/adam.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/comm/communicator.h"
#include "common/model/actor_critic.h"
#include "common/wire/episode.h"
#include "learner/gradient_reducer.h"
#include "learner/policy_losses.h"

namespace kvrl {

struct WindowBatch;
class WindowRows;
struct PpoTargets;

struct LearnerOptions {
  std::string algorithm = "ppo";              // "ppo" or "vtrace"
  double learning_rate = 3e-4;                // Adam step size at the start
  std::string lr_schedule = "constant";       // "constant" or "linear" (to 0 at planned_updates)
  std::string entropy_schedule = "constant";  // as lr_schedule, for entropy_coef
  int64_t planned_updates = 0;                // for the linear schedule
  double max_grad_norm = 0.5;                 // clip the global gradient norm; 0 = off
  double reward_scale = 1.0;                  // rewards are multiplied by this for the losses (not the stats)
  double gamma = 0.99;
  double gae_lambda = 0.95;   // PPO
  double clip_epsilon = 0.2;  // PPO ratio clip
  // PPO: clip the ratio against the learner's own policy at the batch start (the proximal
  // policy) and correct for the actors' older behaviour policy with importance weights
  // truncated at rho_bar (decoupled PPO, Hilton et al. 2021); false: classic PPO, whose
  // ratio is taken against the behaviour policy (the default: it learned CartPole better
  // here, docs/training.md).
  bool decoupled = false;
  double value_clip = 0.0;  // PPO value clip around the batch-start values; 0 = off
  // Where advantages are standardised: over the whole batch ("batch", PPO only: V-trace's
  // targets exist one minibatch at a time), over each minibatch's steps ("minibatch", as the
  // reference's ClipPPOLoss(normalize_advantage=True) does), or not at all ("none"); "auto"
  // is batch for PPO and none for V-trace (IMPALA's policy gradient).
  std::string advantage_normalization = "auto";
  // PPO: recompute the values (the value clip's anchor), advantages and value targets with
  // the current weights before each epoch after the first (the reference's PPO loop calls
  // its GAE module once per epoch); false: once, at the batch's start. Costs one no-grad
  // forward of the batch per later epoch; with one epoch it changes nothing.
  bool recompute_advantages = false;
  int64_t epochs = 4;       // passes over each batch
  int64_t minibatches = 4;  // optimizer steps per epoch, each on a share of the rows
  double entropy_coef = 0.01;
  double value_coef = 0.5;
  double rho_bar = 1.0;  // V-trace, and decoupled PPO's behaviour correction
  double c_bar = 1.0;    // V-trace
  // Gradients are averaged over the learners in flat buckets of at most this many bytes,
  // each started while backward still runs (overlap_allreduce), or all after it.
  int64_t allreduce_bucket_bytes = int64_t{25} << 20;
  bool overlap_allreduce = true;
  // The most tokens a window row may take (a context prefix, the steps and the final
  // observation); 0: the model's max_seq_len.
  int64_t max_window_tokens = 0;
};

struct UpdateStats {
  double policy_loss = 0, value_loss = 0, entropy = 0;
  double approx_kl = 0, clip_fraction = 0;  // PPO
  double rho_mean = 0, rho_max = 0;         // V-trace, decoupled PPO: truncated pi/mu
  double grad_norm = 0, learning_rate = 0, entropy_coef = 0, packing_efficiency = 0;
  // The learner's policy at the batch's start against the acting policy (PPO: the whole
  // batch; V-trace: the first minibatch's rows).
  double acting_kl = 0;
  int64_t same_version_steps = 0;
  double same_version_max_log_prob_error = 0, same_version_max_value_error = 0;
  int64_t episodes = 0, steps = 0;
  // A loss or gradient was NaN or Inf on some learner: that optimizer step and the rest
  // of the update were skipped, so the parameters are those of the last finite step.
  bool skipped = false;
};

class Learner {
 public:
  // Throws InvalidArgumentError on invalid options.
  Learner(std::shared_ptr<ActorCritic> model, LearnerOptions options,
          std::shared_ptr<Communicator> communicator);

  // One update (PPO: `epochs` optimizer steps) from this learner's share of a batch; a
  // collective over the learners, which must all call it with their shares.
  // `policy_version`: the version this learner's parameters hold, for the acting
  // agreement's same-version figures (-1: none).
  UpdateStats update(const std::vector<Episode>& episodes, int64_t policy_version = -1);

  // Copies learner 0's parameters into every learner (call once at start).
  void synchronize_parameters();
  ActorCritic& model() { return *model_; }
  // Where the model, and so every batch, lives.
  c10::Device device() const;
  int64_t updates() const { return updates_; }
  torch::optim::Adam& optimizer() { return optimizer_; }
  // Sets the update count a checkpoint was taken at (it drives the learning-rate schedule).
  void restore_update_count(int64_t updates) { updates_ = updates; }
  // Gradient buckets this learner has all-reduced with overlap_allreduce, and how many of
  // them started while backward was still running.
  int64_t allreduce_buckets() const { return allreduce_buckets_; }
  int64_t allreduce_buckets_during_backward() const { return allreduce_buckets_during_backward_; }
  // Fault injection for tests: the next update's loss is NaN on this learner.
  void inject_nonfinite_loss_next_update() { inject_nonfinite_loss_ = true; }

 private:
  // Returns the gradient norm before clipping; skips the step (and sets
  // skipped_this_update_) when the loss or the averaged gradient is not finite.
  double step_optimizer(const at::Tensor& loss);
  // One optimizer step on the weighted sum of the terms; the first step of an update also
  // records the terms in `stats`, as the batch started.
  void optimize(const at::Tensor& policy_loss, const at::Tensor& value_loss, const at::Tensor& entropy,
                bool first_step, UpdateStats& stats);
  UpdateStats update_ppo(const std::vector<Episode>& episodes, int64_t policy_version);
  UpdateStats update_vtrace(const std::vector<Episode>& episodes, int64_t policy_version);
  // `value` at this update under `schedule`: constant, or linear from value at the first
  // update to 0 at planned_updates and after (constant without planned_updates).
  double scheduled(double value, const std::string& schedule) const;
  // advantage_normalization with "auto" resolved for the algorithm.
  std::string advantage_scope() const;
  // GAE from `values`, the value targets, and the advantages as advantage_normalization says.
  void set_advantages(const WindowBatch& batch, const at::Tensor& values, PpoTargets& targets) const;
  // The batch's windows, on the learner's device.
  WindowBatch pack(const std::vector<Episode>& episodes) const;
  // Gamma, lambda and the reward scale (with the return normaliser's, when normalised).
  ReturnOptions return_options() const;

  // One minibatch's loss terms, as the algorithm computes them from its rows and the
  // model's window over them (which carries the gradient).
  struct MinibatchLoss {
    at::Tensor policy, value, entropy;
  };
  using MinibatchLossFn = std::function<MinibatchLoss(const WindowRows& rows, const PolicyWindow& window)>;
  // The loop PPO and V-trace share: `epochs` passes over the batch's rows, each shuffled
  // into `minibatches` minibatches, one optimizer step per minibatch; fills the stats that
  // do not depend on the algorithm.
  // `before_epoch`, when given, runs before each epoch's minibatches with the epoch's index.
  void train_on_minibatches(const WindowBatch& batch, const MinibatchLossFn& loss_of, UpdateStats& stats,
                            const std::function<void(int64_t)>& before_epoch = {});

  std::shared_ptr<ActorCritic> model_;
  LearnerOptions options_;
  std::shared_ptr<Communicator> communicator_;
  torch::optim::Adam optimizer_;
  std::unique_ptr<GradientReducer> reducer_;  // with overlap_allreduce and more than one learner
  int64_t updates_ = 0;
  int64_t allreduce_buckets_ = 0;
  int64_t allreduce_buckets_during_backward_ = 0;
  bool skipped_this_update_ = false;
  bool inject_nonfinite_loss_ = false;
};

}  // namespace kvrl
