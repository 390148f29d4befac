// A module's parameters as one flat float32 vector, in parameter order, and back: what
// the weight messages carry.
#pragma once

#include <ATen/core/Tensor.h>

#include <span>
#include <vector>

namespace kvrl {

std::vector<float> flatten_parameters(const std::vector<at::Tensor>& parameters);
// Copies `values` into `parameters` (same order and total size; checked).
void assign_parameters(std::span<const float> values, std::vector<at::Tensor>& parameters);

}  // namespace kvrl
