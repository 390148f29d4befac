// Positions and attention masks derived from is_init flags. The learner's window path
// and the conformance tool use them to rebuild, for a [*batch, T] window, where each
// step sits in its episode and which steps it may attend to.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace kvrl {

// Position of each step within its episode segment: restarts at 0 on every is_init,
// and the first step of the window is always position 0. Returns kLong [*batch, T].
// Throws InvalidArgumentError unless is_init is a bool tensor with at least one dim.
at::Tensor positions_from_is_init(const at::Tensor& is_init);

// Block-diagonal causal mask [*batch, T, T]: entry [i, j] is true (may attend) iff
// j <= i and steps i and j belong to the same episode segment, and, with a sliding
// `window` W > 0, i - j < W.
// Throws InvalidArgumentError unless is_init is a bool tensor with at least one dim.
at::Tensor segment_causal_mask_from_is_init(const at::Tensor& is_init, int64_t window = 0);

}  // namespace kvrl
