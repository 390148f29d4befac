#include "actor/space.h"

#include <cmath>
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

Space Space::box(std::vector<int64_t> shape, std::vector<float> low, std::vector<float> high,
                 ObservationElement element) {
  Space space;
  space.kind = Kind::kBox;
  space.element = element;
  space.shape = std::move(shape);
  const int64_t size = space.flat_size();
  if (static_cast<int64_t>(low.size()) != size || static_cast<int64_t>(high.size()) != size) {
    throw InvalidArgumentError("box bounds must have " + std::to_string(size) + " elements, got " +
                               std::to_string(low.size()) + " and " + std::to_string(high.size()));
  }
  for (int64_t i = 0; i < size; ++i) {
    if (!(low[i] <= high[i])) throw InvalidArgumentError("box bound " + std::to_string(i) + ": low > high");
    const auto is_byte = [](float value) { return value >= 0 && value <= 255 && std::trunc(value) == value; };
    if (element == ObservationElement::kUInt8 && (!is_byte(low[i]) || !is_byte(high[i]))) {
      throw InvalidArgumentError("uint8 box bound " + std::to_string(i) + " (low " + std::to_string(low[i]) +
                                 ", high " + std::to_string(high[i]) + ") must be integers in [0, 255]");
    }
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
  const std::string prefix = element == ObservationElement::kUInt8 ? "uint8 box(" : "box(";
  return prefix + list(shape) + ", low=" + list(low) + ", high=" + list(high) + ")";
}

}  // namespace kvrl
