#include "common/model/autocast_scope.h"

#include <ATen/autocast_mode.h>

namespace kvrl {

AutocastScope::AutocastScope(c10::DeviceType device_type, c10::ScalarType dtype, bool enabled)
    : device_type_(device_type),
      previous_enabled_(at::autocast::is_autocast_enabled(device_type)),
      previous_dtype_(at::autocast::get_autocast_dtype(device_type)) {
  at::autocast::set_autocast_enabled(device_type_, enabled);
  at::autocast::set_autocast_dtype(device_type_, dtype);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  // Leaving the outermost scope drops the cast weights, as torch.autocast's __exit__ does.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_type_, previous_enabled_);
  at::autocast::set_autocast_dtype(device_type_, previous_dtype_);
}

}  // namespace kvrl
