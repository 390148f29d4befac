// `kvrl eval CHECKPOINT [--env NAME] [--episodes N] [--seed S] [--greedy] [--trace OUT.pt]`:
// plays a saved policy for N episodes (one per environment, all stepped together on the
// cached path) and prints the mean and standard deviation of the return and every
// episode's length. Actions are sampled as in training unless --greedy takes each
// distribution's mode. --trace writes every step: {"episodes": [{observations, actions,
// rewards, context_starts}]}, the raw observations the policy was given.
//
// `kvrl export CHECKPOINT OUT.pt`: writes the policy for use outside kvrl, loadable with
// torch.load(OUT.pt, weights_only=True): a dict with
//   transformer  the TransformerModule state dict, by the reference's parameter names
//                (TorchRL's TransformerModule(**config).load_state_dict takes it as is)
//   config       the TransformerModule's constructor arguments
//   policy_head, value_head  {weight, bias} of the linear heads (and log_std for Gaussian);
//                with model.critic = mlp, critic (a Sequential(Linear, Tanh, Linear, Tanh,
//                Linear) state dict) instead of value_head
//   policy       {discrete, num_outputs, temporal_context, critic, env}
//   observation_norm  {mean, var, epsilon, clip}, when the policy normalises observations:
//                it sees clamp((x - mean) / sqrt(var + epsilon), -clip, clip)
#pragma once

#include <string>
#include <vector>

namespace kvrl {

struct EvalArguments;

int run_eval(const EvalArguments& arguments);
void run_export(const std::string& checkpoint, const std::string& out_path);

}  // namespace kvrl
