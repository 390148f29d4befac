// Observation values of some steps, stored as the environment declares them: float32, or
// one byte each for uint8 observations (pixels, grid codes), so that an image episode
// crosses the wire and waits in a learner's queue at a quarter of the float size.
// Values enter and leave as floats; a uint8 store holds only exact integers in [0, 255].
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace kvrl {

enum class ObservationElement : uint8_t { kFloat32, kUInt8 };

// "float32" or "uint8".
std::string element_name(ObservationElement element);
size_t element_bytes(ObservationElement element);

class ObservationValues {
 public:
  explicit ObservationValues(ObservationElement element = ObservationElement::kFloat32);
  ObservationValues(std::vector<float> values);  // NOLINT(google-explicit-constructor): float32 values
  ObservationValues(std::initializer_list<float> values);
  // `count` values of `element` copied from `bytes` (count * element_bytes(element) bytes).
  static ObservationValues from_bytes(ObservationElement element, const uint8_t* bytes, size_t count);

  ObservationElement element() const { return element_; }
  size_t size() const;
  bool empty() const { return size() == 0; }
  size_t byte_size() const { return size() * element_bytes(element_); }
  // The stored values as bytes, in the element type (what the wire carries).
  const void* data() const;

  // Throws InvalidArgumentError, naming the value, when a uint8 store is given a value
  // that is not an integer in [0, 255].
  void append(std::span<const float> values);
  void append(std::initializer_list<float> values) {
    append(std::span<const float>(values.begin(), values.size()));
  }
  void push_back(float value) { append(std::span<const float>(&value, 1)); }
  void assign(std::span<const float> values);
  void assign(size_t count, float value);
  void clear();
  void reserve(size_t count);

  float operator[](size_t index) const;
  std::vector<float> to_floats() const;
  // The float32 store itself; throws InvalidArgumentError on a uint8 store.
  std::span<const float> floats() const;
  // Whether every value is finite (a uint8 store always is).
  bool all_finite() const;

  bool operator==(const ObservationValues& other) const = default;

 private:
  ObservationElement element_;
  std::vector<float> floats_;   // the float32 store
  std::vector<uint8_t> bytes_;  // the uint8 store
};

}  // namespace kvrl
