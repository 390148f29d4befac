#include "common/wire/observation_values.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "common/support/errors.h"

namespace kvrl {

std::string element_name(ObservationElement element) {
  return element == ObservationElement::kUInt8 ? "uint8" : "float32";
}

size_t element_bytes(ObservationElement element) { return element == ObservationElement::kUInt8 ? 1 : 4; }

ObservationValues::ObservationValues(ObservationElement element) : element_(element) {}

ObservationValues::ObservationValues(std::vector<float> values)
    : element_(ObservationElement::kFloat32), floats_(std::move(values)) {}

ObservationValues::ObservationValues(std::initializer_list<float> values)
    : element_(ObservationElement::kFloat32), floats_(values) {}

ObservationValues ObservationValues::from_bytes(ObservationElement element, const uint8_t* bytes,
                                                size_t count) {
  ObservationValues values(element);
  if (count == 0) return values;  // `bytes` may be null then, which memcpy must not get
  if (element == ObservationElement::kUInt8) {
    values.bytes_.assign(bytes, bytes + count);
  } else {
    values.floats_.resize(count);
    std::memcpy(values.floats_.data(), bytes, count * sizeof(float));
  }
  return values;
}

size_t ObservationValues::size() const {
  return element_ == ObservationElement::kUInt8 ? bytes_.size() : floats_.size();
}

const void* ObservationValues::data() const {
  return element_ == ObservationElement::kUInt8 ? static_cast<const void*>(bytes_.data())
                                                : static_cast<const void*>(floats_.data());
}

void ObservationValues::append(std::span<const float> values) {
  if (element_ == ObservationElement::kFloat32) {
    floats_.insert(floats_.end(), values.begin(), values.end());
    return;
  }
  const size_t old_size = bytes_.size();
  bytes_.resize(old_size + values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const float value = values[i];
    // Exact integers only: a uint8 space that yields anything else is a broken environment,
    // and rounding it away would train on values the policy never saw.
    if (!(value >= 0.0f && value <= 255.0f) || std::trunc(value) != value) {
      bytes_.resize(old_size);
      std::ostringstream text;
      text << "observation value " << value << " (element " << i
           << " of the step) does not fit a uint8 observation: expected an integer in [0, 255]";
      throw InvalidArgumentError(text.str());
    }
    bytes_[old_size + i] = static_cast<uint8_t>(value);
  }
}

void ObservationValues::assign(std::span<const float> values) {
  clear();
  append(values);
}

void ObservationValues::assign(size_t count, float value) {
  clear();
  reserve(count);
  for (size_t i = 0; i < count; ++i) push_back(value);
}

void ObservationValues::clear() {
  floats_.clear();
  bytes_.clear();
}

void ObservationValues::reserve(size_t count) {
  if (element_ == ObservationElement::kUInt8) {
    bytes_.reserve(count);
  } else {
    floats_.reserve(count);
  }
}

float ObservationValues::operator[](size_t index) const {
  return element_ == ObservationElement::kUInt8 ? static_cast<float>(bytes_[index]) : floats_[index];
}

std::vector<float> ObservationValues::to_floats() const {
  if (element_ == ObservationElement::kFloat32) return floats_;
  return {bytes_.begin(), bytes_.end()};
}

std::span<const float> ObservationValues::floats() const {
  if (element_ != ObservationElement::kFloat32) {
    throw InvalidArgumentError("ObservationValues::floats() on a uint8 store: use to_floats()");
  }
  return floats_;
}

bool ObservationValues::all_finite() const {
  for (float value : floats_) {
    if (!std::isfinite(value)) return false;
  }
  return true;
}

}  // namespace kvrl
