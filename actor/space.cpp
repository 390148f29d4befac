#include "actor/space.h"

#include <sstream>

#include "common/support/errors.h"

namespace kvrl {
namespace {

template <typename T>
std::string list(const std::vector<T>& values) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << "]";
  return out.str();
}

}  // namespace

Space Space::discrete(int64_t n) {
  if (n < 1) throw InvalidArgumentError("discrete space size (" + std::to_string(n) + ") must be >= 1");
  Space space;
  space.kind = Kind::kDiscrete;
  space.n = n;
  return space;
}

Space Space::box(std::vector<int64_t> shape, std::vector<float> low, std::vector<float> high) {
  Space space;
  space.kind = Kind::kBox;
  space.shape = std::move(shape);
  const int64_t size = space.flat_size();
  if (static_cast<int64_t>(low.size()) != size || static_cast<int64_t>(high.size()) != size) {
    throw InvalidArgumentError("box bounds must have " + std::to_string(size) + " elements, got " +
                               std::to_string(low.size()) + " and " + std::to_string(high.size()));
  }
  for (int64_t i = 0; i < size; ++i) {
    if (!(low[i] <= high[i])) throw InvalidArgumentError("box bound " + std::to_string(i) + ": low > high");
  }
  space.low = std::move(low);
  space.high = std::move(high);
  return space;
}

int64_t Space::flat_size() const {
  if (is_discrete()) return 1;
  int64_t size = 1;
  for (int64_t dim : shape) size *= dim;
  return size;
}

std::string Space::describe() const {
  if (is_discrete()) return "discrete(" + std::to_string(n) + ")";
  return "box(" + list(shape) + ", low=" + list(low) + ", high=" + list(high) + ")";
}

}  // namespace kvrl
