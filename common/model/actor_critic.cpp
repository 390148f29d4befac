#include "common/model/actor_critic.h"

#include <ATen/ops/full.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/multinomial.h>
#include <ATen/ops/normal.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>

#include <cmath>
#include <numbers>

#include "common/model/autocast_scope.h"
#include "common/support/errors.h"

namespace kvrl {

ActorCritic::ActorCritic(const ActorCriticOptions& options) : options_(options) {
  if (options.num_outputs < 1 || (options.discrete && options.num_outputs < 2)) {
    throw InvalidArgumentError(
        "ActorCritic: num_outputs (" + std::to_string(options.num_outputs) +
        ") must be >= 2 actions for a categorical head or >= 1 dimension for a Gaussian");
  }
  if (options.image_encoder) {
    if (options.normalize_observations) {
      throw InvalidArgumentError(
          "ActorCritic: normalize_observations does not apply with an image encoder, which scales its "
          "input by input_scale instead");
    }
    image_encoder_ = register_module("encoder", std::make_shared<ImageEncoder>(*options.image_encoder));
    if (options.transformer.input_size != options.image_encoder->features) {
      throw InvalidArgumentError("ActorCritic: the trunk's input_size (" +
                                 std::to_string(options.transformer.input_size.value_or(0)) +
                                 ") must be the image encoder's features (" +
                                 std::to_string(options.image_encoder->features) + ")");
    }
  }
  trunk_ = register_module("trunk", std::make_shared<TransformerModule>(options.transformer));
  const int64_t hidden = *options.transformer.hidden_size;
  policy_head_ = register_module("policy_head", torch::nn::Linear(hidden, options.num_outputs));
  build_critic(hidden);
  {
    // Small initial policy outputs keep the first policy close to uniform (or to a
    // zero-mean Gaussian), as common PPO implementations do.
    torch::NoGradGuard no_grad;
    policy_head_->weight.mul_(0.01);
    policy_head_->bias.zero_();
  }
  if (!options.discrete) {
    log_std_ = register_parameter("log_std", at::full({options.num_outputs}, options.initial_log_std));
  }
  if (options.normalize_observations) {
    if (!(options.observation_clip > 0)) {
      throw InvalidArgumentError("ActorCritic: observation_clip (" +
                                 std::to_string(options.observation_clip) + ") must be > 0");
    }
    observation_moments_ = register_moments("observation", *options.transformer.input_size);
  }
  if (options.normalize_rewards) return_moments_ = register_moments("return", 1);
}

void ActorCritic::build_critic(int64_t hidden) {
  if (options_.critic == CriticKind::kTrunk) {
    value_head_ = register_module("value_head", torch::nn::Linear(hidden, 1));
    return;
  }
  if (options_.image_encoder) {
    throw InvalidArgumentError(
        "ActorCritic: the MLP critic reads the flat observation; with an image encoder use the trunk's value "
        "head");
  }
  const int64_t width = options_.critic_hidden_size;
  if (width < 1) {
    throw InvalidArgumentError("ActorCritic: critic_hidden_size (" + std::to_string(width) +
                               ") must be >= 1");
  }
  critic_ = register_module(
      "critic",
      torch::nn::Sequential(torch::nn::Linear(*options_.transformer.input_size, width), torch::nn::Tanh(),
                            torch::nn::Linear(width, width), torch::nn::Tanh(), torch::nn::Linear(width, 1)));
  // CleanRL's initialisation: orthogonal weights with gain sqrt(2) in the hidden layers and
  // 1 at the output, zero biases.
  torch::NoGradGuard no_grad;
  for (const size_t index : {0, 2, 4}) {
    auto* layer = critic_[index]->as<torch::nn::Linear>();
    torch::nn::init::orthogonal_(layer->weight, index == 4 ? 1.0 : std::sqrt(2.0));
    layer->bias.zero_();
  }
}

at::Tensor ActorCritic::values_of(const at::Tensor& features, const at::Tensor& input) {
  const at::Tensor values = critic_ ? critic_->forward(input) : value_head_->forward(features);
  return values.squeeze(-1).to(at::kFloat);
}

RunningMoments ActorCritic::register_moments(const std::string& name, int64_t features) {
  // Parameters without gradients: the optimizer and the gradient all-reduce pass them by,
  // the weight messages, checkpoints and exports carry them.
  return {register_parameter(name + "_mean", at::zeros({features}), /*requires_grad=*/false),
          register_parameter(name + "_var", at::ones({features}), /*requires_grad=*/false),
          register_parameter(name + "_count", at::full({1}, kInitialMomentCount), /*requires_grad=*/false)};
}

at::Tensor ActorCritic::trunk_input(const at::Tensor& observations) const {
  if (image_encoder_) return image_encoder_->forward(observations);
  at::Tensor values = observations.is_floating_point() ? observations : observations.to(at::kFloat);
  if (!options_.normalize_observations) return values;
  return observation_moments_.normalize(values, options_.observation_clip);
}

int64_t ActorCritic::observation_size() const {
  return image_encoder_ ? image_encoder_->observation_size() : *options_.transformer.input_size;
}

void ActorCritic::set_autocast(std::optional<c10::ScalarType> dtype) {
  if (dtype && *dtype != at::kBFloat16) {
    throw InvalidArgumentError(std::string("ActorCritic autocast dtype ") + c10::toString(*dtype) +
                               " is not supported: use bfloat16, or none for float32");
  }
  autocast_ = dtype;
}

namespace {

// Autocast for the policy's forward passes when one is set (engaged only then).
class OptionalAutocast {
 public:
  OptionalAutocast(std::optional<c10::ScalarType> dtype, c10::DeviceType device_type) {
    if (dtype) scope_.emplace(device_type, *dtype);
  }

 private:
  std::optional<AutocastScope> scope_;
};

}  // namespace

at::Tensor ActorCritic::context_flags(const at::Tensor& is_init) const {
  return options_.temporal_context ? is_init : at::ones_like(is_init);
}

PolicyStep ActorCritic::act(const at::Tensor& observations, const at::Tensor& is_init,
                            at::Generator generator, bool greedy, const at::Tensor& stream_ids) {
  torch::NoGradGuard no_grad;
  const OptionalAutocast autocast(autocast_, device_type());
  const at::Tensor input = trunk_input(observations);
  const at::Tensor features = stream_ids.defined()
                                  ? trunk_->step_streams(input, context_flags(is_init), stream_ids)
                                  : trunk_->step(input, context_flags(is_init));
  const at::Tensor policy = policy_head_->forward(features).to(at::kFloat);
  PolicyStep step;
  step.values = values_of(features, input);
  if (options_.discrete) {
    const at::Tensor log_probs = at::log_softmax(policy, -1);
    const at::Tensor index = greedy ? policy.argmax(-1, /*keepdim=*/true)
                                    : at::multinomial(log_probs.exp(), 1, /*replacement=*/false, generator);
    step.actions = index.to(at::kFloat);
    step.log_probs = log_probs.gather(-1, index).squeeze(-1);
  } else {
    const at::Tensor noise = at::normal(0.0, 1.0, policy.sizes(), generator, policy.options());
    step.actions = greedy ? policy : policy + log_std_.exp() * noise;
    step.log_probs = log_prob_of(policy, step.actions);
  }
  return step;
}

void ActorCritic::mark_weight_update_keeping_context(const at::Tensor& observations,
                                                     const at::Tensor& lengths) {
  trunk_->mark_weight_update();
  // Without temporal context every step restarts its stream: there is no context to keep.
  if (!options_.temporal_context) return;
  // The steps that follow run under the same autocast, so the rebuilt cache has their dtype.
  const OptionalAutocast autocast(autocast_, device_type());
  trunk_->prefill(trunk_input(observations), lengths);
}

PolicyWindow ActorCritic::evaluate(const at::Tensor& observations, const at::Tensor& is_init) {
  const OptionalAutocast autocast(autocast_, device_type());
  const at::Tensor input = trunk_input(observations);
  const at::Tensor features = trunk_->window(input, context_flags(is_init));
  return {policy_head_->forward(features).to(at::kFloat), values_of(features, input)};
}

at::Tensor ActorCritic::log_prob_of(const at::Tensor& policy, const at::Tensor& actions) const {
  if (options_.discrete) {
    return at::log_softmax(policy, -1).gather(-1, actions.to(at::kLong)).squeeze(-1);
  }
  const at::Tensor z = (actions - policy) / log_std_.exp();
  const double log_sqrt_2pi = 0.5 * std::log(2 * std::numbers::pi);
  return (-0.5 * z * z - log_std_ - log_sqrt_2pi).sum(-1);
}

at::Tensor ActorCritic::log_prob(const PolicyWindow& window, const at::Tensor& actions) const {
  return log_prob_of(window.policy, actions);
}

at::Tensor ActorCritic::entropy(const PolicyWindow& window) const {
  if (options_.discrete) {
    const at::Tensor log_probs = at::log_softmax(window.policy, -1);
    return -(log_probs.exp() * log_probs).sum(-1);
  }
  const double constant = 0.5 + 0.5 * std::log(2 * std::numbers::pi);
  return (log_std_ + constant).sum().expand(window.values.sizes());
}

}  // namespace kvrl
