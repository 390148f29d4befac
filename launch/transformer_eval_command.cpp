#include "launch/transformer_eval_command.h"

#include <ATen/ops/stack.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <optional>
#include <set>
#include <vector>

#include "common/io/state_dict_io.h"
#include "common/io/torch_file.h"
#include "common/model/autocast_scope.h"
#include "common/model/scalar_type_names.h"
#include "common/model/transformer_module.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

const c10::IValue& require_key(const c10::impl::GenericDict& dict, const std::string& key,
                               const std::string& where, const std::string& expected) {
  auto it = dict.find(key);
  if (it == dict.end()) {
    throw MalformedInputError(where + " has no key '" + key + "' (expected " + expected + ")");
  }
  return it->value();
}

at::Tensor require_tensor(const c10::impl::GenericDict& dict, const std::string& key,
                          const std::string& where, const std::string& expected) {
  const c10::IValue& value = require_key(dict, key, where, expected);
  if (!value.isTensor()) {
    throw MalformedInputError(where + "['" + key + "'] must be " + expected + ", got a " + value.tagKind());
  }
  return value.toTensor();
}

// A batch of steps as the caller wrote it: features [B, T, input_size], is_init [B, T].
struct StepInputs {
  at::Tensor features;
  at::Tensor is_init;
};

StepInputs read_step_inputs(const c10::impl::GenericDict& dict, const std::string& where,
                            int64_t input_size) {
  StepInputs inputs;
  inputs.features = require_tensor(dict, "features", where, "a float tensor [B, T, input_size]");
  const at::Tensor& features = inputs.features;
  if (!at::isFloatingType(features.scalar_type()) || features.dim() != 3 || features.size(2) != input_size) {
    throw MalformedInputError(
        where + "['features'] must be a float tensor [B, T, input_size=" + std::to_string(input_size) +
        "], got " + python_dtype_name(features.scalar_type()) + " " + c10::str(features.sizes()));
  }
  inputs.is_init = require_tensor(dict, "is_init", where, "a bool tensor [B, T]");
  if (inputs.is_init.scalar_type() != at::kBool || inputs.is_init.sizes() != features.sizes().slice(0, 2)) {
    throw MalformedInputError(where + "['is_init'] must be a bool tensor " +
                              c10::str(features.sizes().slice(0, 2)) + " matching features, got " +
                              python_dtype_name(inputs.is_init.scalar_type()) + " " +
                              c10::str(inputs.is_init.sizes()));
  }
  return inputs;
}

TransformerModuleOptions parse_config(const c10::impl::GenericDict& input) {
  const c10::IValue& config_value = require_key(input, "config", "input", "a dict of model sizes");
  if (!config_value.isGenericDict()) {
    throw MalformedInputError("input['config'] must be a dict, got a " + config_value.tagKind());
  }
  const auto config = config_value.toGenericDict();
  const std::set<std::string> allowed{"input_size", "hidden_size", "num_layers",
                                      "num_heads",  "max_seq_len", "dim_feedforward"};
  for (const auto& entry : config) {
    const std::string key = entry.key().isString() ? entry.key().toStringRef() : "<non-string>";
    if (!allowed.count(key)) {
      throw MalformedInputError("input['config'] has unknown key '" + key +
                                "' (allowed: input_size, hidden_size, num_layers, num_heads, "
                                "max_seq_len, dim_feedforward)");
    }
  }
  auto integer = [&](const std::string& key) -> std::optional<int64_t> {
    auto it = config.find(key);
    if (it == config.end() || it->value().isNone()) return std::nullopt;
    if (!it->value().isInt()) {
      throw MalformedInputError("input['config']['" + key + "'] must be an int, got a " +
                                it->value().tagKind());
    }
    return it->value().toInt();
  };
  auto required = [&](const std::string& key) {
    auto value = integer(key);
    if (!value) throw MalformedInputError("input['config'] has no key '" + key + "' (expected an int)");
    return *value;
  };
  TransformerModuleOptions options;
  options.input_size = required("input_size");
  options.hidden_size = required("hidden_size");
  options.num_layers = integer("num_layers").value_or(1);
  options.num_heads = required("num_heads");
  options.max_seq_len = required("max_seq_len");
  options.dim_feedforward = integer("dim_feedforward");
  return options;
}

c10::ScalarType parse_dtype(const c10::impl::GenericDict& input) {
  auto it = input.find("dtype");
  if (it == input.end()) return at::kFloat;
  if (!it->value().isString()) {
    throw MalformedInputError("input['dtype'] must be a string (float32, float64 or bfloat16), got a " +
                              it->value().tagKind());
  }
  return parse_module_dtype(it->value().toStringRef());
}

// Loads a TransformerModule state dict ("transformer.*") or a backbone's into the module.
// In place, so the module sees new weights, as an actor does after a weight sync.
void load_weights(TransformerModule& module, const c10::IValue& state_value, const std::string& where) {
  if (!state_value.isGenericDict()) {
    throw MalformedInputError(where + " must be a dict of tensors, got a " + state_value.tagKind());
  }
  const auto state_dict = state_value.toGenericDict();
  for (const auto& entry : state_dict) {
    if (!entry.key().isString()) throw MalformedInputError(where + " keys must be strings");
  }
  if (state_dict.contains("transformer.in_proj.weight")) {
    load_state_dict(module, state_dict);
  } else {
    load_state_dict(module.transformer(), state_dict);
  }
}

// Copies new weights through `.data`, which leaves the parameters' version counters alone:
// what a caller that swaps weights behind the module's back does, so that only an
// explicit mark_weight_update() (or nothing) tells the module.
void assign_weights_silently(TransformerModule& module, const c10::IValue& state_value,
                             const std::string& where) {
  TransformerModule staging(module.options());
  load_weights(staging, state_value, where);
  auto sources = staging.named_parameters();
  torch::NoGradGuard no_grad;
  for (auto& target : module.named_parameters()) {
    target.value().data().copy_(sources[target.key()]);
  }
}

at::Tensor run_steps(TransformerModule& module, const at::Tensor& features, const at::Tensor& is_init) {
  std::vector<at::Tensor> steps;
  steps.reserve(static_cast<size_t>(features.size(1)));
  for (int64_t t = 0; t < features.size(1); ++t) {
    steps.push_back(module.step(features.select(1, t), is_init.select(1, t)));
  }
  return at::stack(steps, /*dim=*/1);
}

// The window's parameter gradients of sum(window * upstream), by parameter name.
c10::Dict<std::string, at::Tensor> window_gradients(TransformerModule& module, const StepInputs& inputs,
                                                    const at::Tensor& upstream) {
  if (upstream.dim() != 3 || upstream.sizes().slice(0, 2) != inputs.features.sizes().slice(0, 2) ||
      upstream.size(2) != module.transformer().num_heads() * module.transformer().head_dim()) {
    throw MalformedInputError(
        "input['window_grad'] must be a float tensor [B, T, hidden_size=" +
        std::to_string(module.transformer().num_heads() * module.transformer().head_dim()) +
        "] matching features, got " + c10::str(upstream.sizes()));
  }
  torch::AutoGradMode enable_grad(true);
  module.zero_grad();
  const at::Tensor window = module.window(inputs.features, inputs.is_init);
  (window * upstream.to(window.scalar_type())).sum().backward();
  c10::Dict<std::string, at::Tensor> gradients;
  for (const auto& item : module.named_parameters())
    gradients.insert(item.key(), item.value().grad().clone());
  return gradients;
}

std::vector<std::string> segment_actions(const c10::impl::GenericDict& segment, const std::string& where) {
  auto it = segment.find("before");
  if (it == segment.end()) return {};
  if (it->value().isString()) return {it->value().toStringRef()};
  if (it->value().isList()) {
    std::vector<std::string> actions;
    for (const c10::IValue& action : it->value().toListRef()) {
      if (!action.isString()) break;
      actions.push_back(action.toStringRef());
    }
    if (actions.size() == it->value().toListRef().size()) return actions;
  }
  throw MalformedInputError(where + "['before'] must be a string or a list of strings, got a " +
                            it->value().tagKind());
}

void apply_segment_action(TransformerModule& module, const std::string& action,
                          const c10::impl::GenericDict& segment, const std::string& where) {
  if (action == "reset_cache") {
    module.reset_cache();
  } else if (action == "mark_weight_update") {
    module.mark_weight_update();
  } else if (action == "load_state_dict") {
    load_weights(module, require_key(segment, "state_dict", where, "a dict of tensors"),
                 where + "['state_dict']");
  } else if (action == "assign_data") {
    assign_weights_silently(module, require_key(segment, "state_dict", where, "a dict of tensors"),
                            where + "['state_dict']");
  } else {
    throw MalformedInputError(where + "['before'] has unknown action '" + action +
                              "' (allowed: reset_cache, mark_weight_update, load_state_dict, assign_data)");
  }
}

// Continues stepping the same module through each segment of input['program'], after the
// segment's actions (cache resets, weight updates), under its optional autocast dtype:
// the restart paths of the cached step, checked against the reference step by step.
c10::List<at::Tensor> run_program(TransformerModule& module, const c10::IValue& program,
                                  c10::ScalarType dtype) {
  if (!program.isList())
    throw MalformedInputError("input['program'] must be a list of dicts, got a " + program.tagKind());
  c10::List<at::Tensor> outputs;
  const auto& segments = program.toListRef();
  for (size_t index = 0; index < segments.size(); ++index) {
    const std::string where = "input['program'][" + std::to_string(index) + "]";
    if (!segments[index].isGenericDict())
      throw MalformedInputError(where + " must be a dict, got a " + segments[index].tagKind());
    const auto segment = segments[index].toGenericDict();
    for (const std::string& action : segment_actions(segment, where))
      apply_segment_action(module, action, segment, where);
    const StepInputs inputs = read_step_inputs(segment, where, *module.options().input_size);
    std::optional<AutocastScope> autocast;
    auto autocast_entry = segment.find("autocast");
    if (autocast_entry != segment.end()) {
      if (!autocast_entry->value().isString() || autocast_entry->value().toStringRef() != "bfloat16") {
        throw MalformedInputError(where + "['autocast'] must be 'bfloat16' (CPU autocast), got " +
                                  autocast_entry->value().tagKind());
      }
      autocast.emplace(c10::DeviceType::CPU, at::kBFloat16);
    }
    outputs.push_back(run_steps(module, inputs.features.to(dtype), inputs.is_init));
  }
  return outputs;
}

}  // namespace

void run_transformer_eval(const std::string& in_path, const std::string& out_path) {
  const c10::IValue root = read_torch_file(in_path);
  if (!root.isGenericDict()) {
    throw MalformedInputError("'" + in_path + "' must hold a dict, got a " + root.tagKind());
  }
  const auto input = root.toGenericDict();
  const TransformerModuleOptions options = parse_config(input);
  const c10::ScalarType dtype = parse_dtype(input);
  StepInputs inputs = read_step_inputs(input, "input", *options.input_size);

  TransformerModule module(options);
  module.to(dtype);
  load_weights(module, require_key(input, "state_dict", "input", "a dict of tensors"), "input['state_dict']");
  module.eval();
  inputs.features = inputs.features.to(dtype);

  torch::NoGradGuard no_grad;
  // The loaded weights as the C++ module saves them, so callers can check they load back
  // into the reference by name.
  c10::impl::GenericDict output(c10::StringType::get(), c10::AnyType::get());
  output.insert("state_dict", state_dict_of(module));
  if (inputs.is_init.select(1, 0).all().item<bool>()) {
    output.insert("window", module.window(inputs.features, inputs.is_init));
    auto upstream = input.find("window_grad");
    if (upstream != input.end()) {
      if (!upstream->value().isTensor())
        throw MalformedInputError("input['window_grad'] must be a float tensor [B, T, hidden_size]");
      output.insert("window_grads", window_gradients(module, inputs, upstream->value().toTensor()));
    }
  }
  output.insert("steps", run_steps(module, inputs.features, inputs.is_init));
  auto program = input.find("program");
  if (program != input.end()) output.insert("program_steps", run_program(module, program->value(), dtype));
  write_torch_file(out_path, output);
}

}  // namespace kvrl
