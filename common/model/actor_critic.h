// The policy actors act with and learners train: a TransformerModule trunk with a policy
// head (categorical logits for discrete actions, a Gaussian mean with a learned,
// state-independent log-std for continuous ones) and a critic: a value head on the trunk's
// features, or a separate MLP on the current observation. Actors call act() on the
// cached-step path; learners call evaluate() on packed windows.
//
// With temporal_context off every step is its own episode (is_init forced on), so the
// same network sees only the current observation: the memoryless baseline.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <memory>
#include <optional>

#include "common/model/image_encoder.h"
#include "common/model/running_moments.h"
#include "common/model/transformer_module.h"

namespace kvrl {

// Where the values come from. kTrunk: a linear head on the transformer's features, so the
// value loss trains the trunk the policy reads. kMlp: a separate tanh MLP (two hidden
// layers) on the current, normalised observation, as CleanRL's and SB3's PPO use for
// MuJoCo: the value gradients leave the policy's features alone, and the values see no
// history (fully observed tasks only).
enum class CriticKind { kTrunk, kMlp };

struct ActorCriticOptions {
  // input_size = the observation size, or the image encoder's features.
  TransformerModuleOptions transformer;
  // model.encoder = cnn: image observations pass a convolutional encoder before the trunk.
  std::optional<ImageEncoderOptions> image_encoder;
  bool discrete = true;           // categorical head, else Gaussian
  int64_t num_outputs = 0;        // actions (discrete) or action dimensions (Gaussian)
  bool temporal_context = true;   // false: each step sees only its own observation
  double initial_log_std = -0.5;  // Gaussian only
  CriticKind critic = CriticKind::kTrunk;
  int64_t critic_hidden_size = 64;  // kMlp: the width of both hidden layers
  // Observations enter the trunk as (x - mean) / sqrt(var + 1e-8), clipped to
  // +-observation_clip, with running statistics the learners update after each update.
  bool normalize_observations = false;
  double observation_clip = 10.0;
  // The learners scale rewards by 1 / std of the discounted return (Gymnasium's
  // NormalizeReward); the statistics are the policy's, as the value head learns in that scale.
  bool normalize_rewards = false;
};

struct PolicyStep {
  at::Tensor actions;    // [B, action_size] float: the index for discrete actions
  at::Tensor log_probs;  // [B]
  at::Tensor values;     // [B]
};

struct PolicyWindow {
  at::Tensor policy;  // [B, T, num_outputs]: logits, or the Gaussian mean
  at::Tensor values;  // [B, T]
};

class ActorCritic : public torch::nn::Module {
 public:
  // Throws InvalidArgumentError on invalid options.
  explicit ActorCritic(const ActorCriticOptions& options);
  ActorCritic(const ActorCritic&) = delete;
  ActorCritic& operator=(const ActorCritic&) = delete;

  // One step for every stream, without gradients: samples from the policy with
  // `generator` (or takes its mode when greedy). observations [B, O], is_init [B] bool.
  // With stream_ids [B] (kLong), only those streams step (TransformerModule::step_streams).
  PolicyStep act(const at::Tensor& observations, const at::Tensor& is_init, at::Generator generator,
                 bool greedy = false, const at::Tensor& stream_ids = {});
  // Window path, with gradients. observations [B, T, O], is_init [B, T].
  PolicyWindow evaluate(const at::Tensor& observations, const at::Tensor& is_init);

  // log pi(actions) [B, T] and entropy [B, T] of the distributions in `window`;
  // actions [B, T, action_size].
  at::Tensor log_prob(const PolicyWindow& window, const at::Tensor& actions) const;
  at::Tensor entropy(const PolicyWindow& window) const;

  // After new weights: restarts every stream's cache (TransformerModule::mark_weight_update).
  void mark_weight_update() { trunk_->mark_weight_update(); }
  // After new weights: keeps every stream's cache, computed with the previous weights.
  void keep_context_across_weight_update() { trunk_->keep_cache_across_weight_update(); }
  // After new weights: discards the cache, then rebuilds it from each stream's steps so far
  // in its episode (observations [B, T, O], lengths [B]), so streams keep their context.
  void mark_weight_update_keeping_context(const at::Tensor& observations, const at::Tensor& lengths);
  // Runs act(), evaluate() and the context rebuild under autocast to `dtype` on the
  // parameters' device, with the heads' outputs back in float32 for sampling and the
  // losses; nullopt: float32 throughout. As in the reference, the cached path's
  // key/value cache then takes the autocast dtype. Only bfloat16 is accepted (float16
  // would need loss scaling in training); throws InvalidArgumentError otherwise.
  void set_autocast(std::optional<c10::ScalarType> dtype);
  std::optional<c10::ScalarType> autocast() const { return autocast_; }
  // The observation and return statistics, when normalised (undefined tensors otherwise).
  RunningMoments& observation_moments() { return observation_moments_; }
  RunningMoments& return_moments() { return return_moments_; }
  TransformerModule& trunk() { return *trunk_; }
  const ActorCriticOptions& options() const { return options_; }
  // Values per observation the policy reads: the image's, or the trunk's input size.
  int64_t observation_size() const;
  int64_t action_size() const { return options_.discrete ? 1 : options_.num_outputs; }

 private:
  at::Tensor context_flags(const at::Tensor& is_init) const;
  // What the trunk sees of `observations` (of any dtype): encoded when the policy has an
  // image encoder, normalised when it normalises, else the observations as floats.
  at::Tensor trunk_input(const at::Tensor& observations) const;
  RunningMoments register_moments(const std::string& name, int64_t features);
  at::Tensor log_prob_of(const at::Tensor& policy, const at::Tensor& actions) const;
  // The values, [...]: from the trunk's features, or from its input with the MLP critic.
  at::Tensor values_of(const at::Tensor& features, const at::Tensor& trunk_input);
  void build_critic(int64_t hidden);
  c10::DeviceType device_type() const { return policy_head_->weight.device().type(); }

  ActorCriticOptions options_;
  std::shared_ptr<ImageEncoder> image_encoder_;  // null without one
  std::shared_ptr<TransformerModule> trunk_;
  torch::nn::Linear policy_head_{nullptr};
  torch::nn::Linear value_head_{nullptr};  // CriticKind::kTrunk
  torch::nn::Sequential critic_{nullptr};  // CriticKind::kMlp
  at::Tensor log_std_;                     // [num_outputs], Gaussian only
  RunningMoments observation_moments_, return_moments_;
  std::optional<c10::ScalarType> autocast_;
};

}  // namespace kvrl
