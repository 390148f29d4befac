#include "launch/command_line.h"

#include <optional>

#include "common/support/errors.h"
#include "common/support/number_text.h"

namespace kvrl {

int64_t parse_count(const std::string& option, const std::string& text, int64_t low, int64_t high) {
  const std::optional<int64_t> value = parse_integer(text);
  if (!value || *value < low || *value > high) {
    throw InvalidArgumentError(option + " '" + text + "' must be an integer in [" + std::to_string(low) +
                               ", " + std::to_string(high) + "]");
  }
  return *value;
}

}  // namespace kvrl
