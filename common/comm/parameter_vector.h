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
// The same from the first elements of a 1-d float tensor on any device (the rest, e.g. a
// trailing version, is ignored); copies stay on the device when the parameters are there.
void assign_parameters(const at::Tensor& flat, std::vector<at::Tensor>& parameters);

}  // namespace kvrl
