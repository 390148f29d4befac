// Reads and writes module parameters as torch's own serialization: a file written by
// Python's torch.save(module.state_dict()) loads here by name, and what save_state_dict
// writes loads with torch.load. Loading goes through TorchFileReader, which rebuilds
// tensors and plain containers only and never runs code from the file.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>

#include <string>

namespace kvrl {

// Parameters and buffers by name, as the state_dict() of the same module in Python.
c10::Dict<std::string, at::Tensor> state_dict_of(const torch::nn::Module& module);

// Copies every parameter and buffer of `module` from `state_dict`, converting dtype and
// device. Throws InvalidArgumentError naming missing keys, unexpected keys, non-tensor
// values or shape mismatches; the module is left unchanged when it throws.
void load_state_dict(torch::nn::Module& module, const c10::impl::GenericDict& state_dict);

void save_state_dict(const torch::nn::Module& module, const std::string& path);
void load_state_dict_file(torch::nn::Module& module, const std::string& path);

}  // namespace kvrl
