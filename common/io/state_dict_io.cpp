#include "common/io/state_dict_io.h"

#include <torch/csrc/autograd/grad_mode.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/io/torch_file.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

std::string join(const std::set<std::string>& names) {
  std::ostringstream out;
  const char* separator = "";
  for (const auto& name : names) {
    out << separator << name;
    separator = ", ";
  }
  return out.str();
}

}  // namespace

c10::Dict<std::string, at::Tensor> state_dict_of(const torch::nn::Module& module) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& item : module.named_parameters()) dict.insert(item.key(), item.value().detach());
  for (const auto& item : module.named_buffers()) dict.insert(item.key(), item.value().detach());
  return dict;
}

void load_state_dict(torch::nn::Module& module, const c10::impl::GenericDict& state_dict) {
  auto targets = module.named_parameters();
  for (const auto& item : module.named_buffers()) targets.insert(item.key(), item.value());

  std::set<std::string> unexpected;
  std::map<std::string, at::Tensor> sources;
  for (const auto& entry : state_dict) {
    if (!entry.key().isString()) {
      throw InvalidArgumentError("state_dict keys must be strings, got a " + entry.key().tagKind());
    }
    const std::string name = entry.key().toStringRef();
    if (!targets.contains(name)) {
      unexpected.insert(name);
      continue;
    }
    if (!entry.value().isTensor()) {
      throw InvalidArgumentError("state_dict entry '" + name + "' must be a tensor, got a " +
                                 entry.value().tagKind());
    }
    sources.emplace(name, entry.value().toTensor());
  }
  std::set<std::string> missing;
  for (const auto& item : targets) {
    if (!sources.count(item.key())) missing.insert(item.key());
  }
  if (!missing.empty() || !unexpected.empty()) {
    throw InvalidArgumentError("state_dict does not match the module: missing keys [" + join(missing) +
                               "], unexpected keys [" + join(unexpected) + "]");
  }
  for (const auto& [name, tensor] : sources) {
    if (tensor.sizes() != targets[name].sizes()) {
      throw InvalidArgumentError("state_dict entry '" + name + "' has shape " + c10::str(tensor.sizes()) +
                                 " but the module expects " + c10::str(targets[name].sizes()));
    }
  }
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : sources) targets[name].copy_(tensor);
}

void save_state_dict(const torch::nn::Module& module, const std::string& path) {
  write_torch_file(path, state_dict_of(module));
}

void load_state_dict_file(torch::nn::Module& module, const std::string& path) {
  const c10::IValue value = read_torch_file(path);
  if (!value.isGenericDict()) {
    throw MalformedInputError("'" + path + "' must hold a state dict (a dict of tensors), got a " +
                              value.tagKind());
  }
  load_state_dict(module, value.toGenericDict());
}

}  // namespace kvrl
