// Observation and action spaces: discrete(n) or a float box with per-element bounds.
// Environments declare them; the actor checks the policy against them at start.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvrl {

struct Space {
  enum class Kind { kDiscrete, kBox };

  Kind kind = Kind::kBox;
  int64_t n = 0;               // number of choices, for kDiscrete
  std::vector<int64_t> shape;  // element shape, for kBox
  std::vector<float> low;      // per-element bounds, for kBox (may be +-inf)
  std::vector<float> high;

  static Space discrete(int64_t n);
  // Throws InvalidArgumentError when the bounds do not match the shape or low > high.
  static Space box(std::vector<int64_t> shape, std::vector<float> low, std::vector<float> high);

  bool is_discrete() const { return kind == Kind::kDiscrete; }
  // Floats one value of this space takes: 1 for discrete (the index), prod(shape) for a box.
  int64_t flat_size() const;
  // "discrete(2)" or "box([3], low=[-1, -1, -8], high=[1, 1, 8])".
  std::string describe() const;
  bool operator==(const Space& other) const = default;
};

}  // namespace kvrl
