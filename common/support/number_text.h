// Numbers read from text that people write: config values, command-line options,
// environment variables. The whole text must be the number (no trailing characters, no
// blanks); anything else is nullopt, for the caller to reject naming the value.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kvrl {

std::optional<int64_t> parse_integer(std::string_view text);
// A finite number: NaN and infinities are nullopt.
std::optional<double> parse_number(std::string_view text);

}  // namespace kvrl
