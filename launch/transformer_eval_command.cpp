#include "launch/transformer_eval_command.h"

#include <ATen/ops/stack.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <set>
#include <vector>

#include "common/io/state_dict_io.h"
#include "common/io/torch_file.h"
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

at::Tensor require_tensor(const c10::impl::GenericDict& input, const std::string& key,
                          const std::string& expected) {
  const c10::IValue& value = require_key(input, key, "input", expected);
  if (!value.isTensor()) {
    throw MalformedInputError("input['" + key + "'] must be " + expected + ", got a " + value.tagKind());
  }
  return value.toTensor();
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

}  // namespace

void run_transformer_eval(const std::string& in_path, const std::string& out_path) {
  const c10::IValue root = read_torch_file(in_path);
  if (!root.isGenericDict()) {
    throw MalformedInputError("'" + in_path + "' must hold a dict, got a " + root.tagKind());
  }
  const auto input = root.toGenericDict();
  const TransformerModuleOptions options = parse_config(input);
  const c10::ScalarType dtype = parse_dtype(input);

  at::Tensor features = require_tensor(input, "features", "a float tensor [B, T, input_size]");
  if (!at::isFloatingType(features.scalar_type()) || features.dim() != 3 ||
      features.size(2) != *options.input_size) {
    throw MalformedInputError(
        "input['features'] must be a float tensor [B, T, input_size=" + std::to_string(*options.input_size) +
        "], got " + python_dtype_name(features.scalar_type()) + " " + c10::str(features.sizes()));
  }
  at::Tensor is_init = require_tensor(input, "is_init", "a bool tensor [B, T]");
  if (is_init.scalar_type() != at::kBool || is_init.sizes() != features.sizes().slice(0, 2)) {
    throw MalformedInputError("input['is_init'] must be a bool tensor " +
                              c10::str(features.sizes().slice(0, 2)) + " matching features, got " +
                              python_dtype_name(is_init.scalar_type()) + " " + c10::str(is_init.sizes()));
  }
  const c10::IValue& state_value = require_key(input, "state_dict", "input", "a dict of tensors");
  if (!state_value.isGenericDict()) {
    throw MalformedInputError("input['state_dict'] must be a dict of tensors, got a " +
                              state_value.tagKind());
  }

  TransformerModule module(options);
  module.to(dtype);
  // Accept both a TransformerModule state dict ("transformer.*") and a backbone's.
  const auto state_dict = state_value.toGenericDict();
  for (const auto& entry : state_dict) {
    if (!entry.key().isString()) throw MalformedInputError("input['state_dict'] keys must be strings");
  }
  const bool module_keys = state_dict.contains("transformer.in_proj.weight");
  if (module_keys) {
    load_state_dict(module, state_dict);
  } else {
    load_state_dict(module.transformer(), state_dict);
  }
  module.eval();
  features = features.to(dtype);

  torch::NoGradGuard no_grad;
  // The loaded weights as the C++ module saves them, so callers can check they load back
  // into the reference by name.
  c10::impl::GenericDict output(c10::StringType::get(), c10::AnyType::get());
  output.insert("state_dict", state_dict_of(module));
  if (is_init.select(1, 0).all().item<bool>()) {
    output.insert("window", module.window(features, is_init));
  }
  std::vector<at::Tensor> steps;
  for (int64_t t = 0; t < features.size(1); ++t) {
    steps.push_back(module.step(features.select(1, t), is_init.select(1, t)));
  }
  output.insert("steps", at::stack(steps, /*dim=*/1));
  write_torch_file(out_path, output);
}

}  // namespace kvrl
