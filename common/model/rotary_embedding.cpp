#include "common/model/rotary_embedding.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/pow.h>

namespace kvrl {
namespace {

// The reference frequency base of RoFormer and Llama.
constexpr double kRotaryBase = 10000.0;

}  // namespace

RotaryAngles rotary_angles(const at::Tensor& positions, int64_t head_dim, c10::ScalarType dtype) {
  const auto double_options = positions.options().dtype(at::kDouble);
  const at::Tensor exponents = at::arange(0, head_dim, 2, double_options) / static_cast<double>(head_dim);
  const at::Tensor inverse_frequencies = at::pow(kRotaryBase, -exponents);
  const at::Tensor angles = positions.to(at::kDouble).unsqueeze(-1) * inverse_frequencies;  // [B, T, D/2]
  return {angles.cos().to(dtype).unsqueeze(1), angles.sin().to(dtype).unsqueeze(1)};
}

at::Tensor apply_rotary(const at::Tensor& x, const RotaryAngles& angles) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor cos = angles.cos.to(x.scalar_type());
  const at::Tensor sin = angles.sin.to(x.scalar_type());
  const at::Tensor first = x.narrow(-1, 0, half);
  const at::Tensor second = x.narrow(-1, half, half);
  return at::cat({first * cos - second * sin, second * cos + first * sin}, -1);
}

}  // namespace kvrl
