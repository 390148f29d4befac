// Observation and action spaces: discrete(n) or a float box with per-element bounds.
// Environments declare them; the actor checks the policy against them at start.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/wire/observation_values.h"

namespace kvrl {

struct Space {
  enum class Kind { kDiscrete, kBox };

  Kind kind = Kind::kBox;
  int64_t n = 0;               // number of choices, for kDiscrete
  std::vector<int64_t> shape;  // element shape, for kBox
  std::vector<float> low;      // per-element bounds, for kBox (may be +-inf)
  std::vector<float> high;
  // How a box's values are stored: uint8 boxes (images, grid codes) hold integers in
  // [0, 255] and stay one byte each on the wire and in training batches.
  ObservationElement element = ObservationElement::kFloat32;

  static Space discrete(int64_t n);
  // Throws InvalidArgumentError when the bounds do not match the shape or low > high, or
  // when a uint8 box's bounds are not integers in [0, 255].
  static Space box(std::vector<int64_t> shape, std::vector<float> low, std::vector<float> high,
                   ObservationElement element = ObservationElement::kFloat32);

  bool is_discrete() const { return kind == Kind::kDiscrete; }
  // Floats one value of this space takes: 1 for discrete (the index), prod(shape) for a box.
  int64_t flat_size() const;
  // "discrete(2)", "box([3], low=[-1, -1, -8], high=[1, 1, 8])" or "uint8 box([2], low=[0, 0], high=[255,
  // 255])".
  std::string describe() const;
  bool operator==(const Space& other) const = default;
};

}  // namespace kvrl
