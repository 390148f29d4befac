// Rotary position embeddings (RoFormer, Su et al. 2021) for CausalTransformer's queries and
// keys: a position rotates each pair of a head's channels by an angle proportional to it,
// so a query-key product depends only on the distance between the two steps. That is what
// lets a sliding window attend to the last W steps of an episode of any length, where a
// learned position table runs out at max_seq_len.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace kvrl {

// cos and sin of every position's angle per channel pair, [B, 1, T, head_dim / 2].
struct RotaryAngles {
  at::Tensor cos;
  at::Tensor sin;
};

// The angles of `positions` ([B, T], kLong) for heads `head_dim` wide (even), in `dtype`.
// They are computed in float64 and rounded once, so a position of millions is as exact as
// position 0 and two paths that number the same steps differently (the actor from its
// context start, the learner from its window start) agree to float rounding.
RotaryAngles rotary_angles(const at::Tensor& positions, int64_t head_dim, c10::ScalarType dtype);

// x [B, heads, T, head_dim] rotated by `angles` (first half of the channels paired with the
// second half, as in GPT-NeoX and Llama).
at::Tensor apply_rotary(const at::Tensor& x, const RotaryAngles& angles);

}  // namespace kvrl
