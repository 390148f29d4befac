// Enables autocast for one device type for the lifetime of the object, the C++ analogue
// of `with torch.autocast(device_type, dtype)`. The cached-step path reads the active
// autocast dtype to choose its cache dtype, as the reference does.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace kvrl {

class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device_type, c10::ScalarType dtype, bool enabled = true);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_type_;
  bool previous_enabled_;
  c10::ScalarType previous_dtype_;
};

}  // namespace kvrl
