// Spells dtypes the way PyTorch users read them ("torch.float32"), so error messages
// and files exchanged with Python name dtypes identically on both sides.
#pragma once

#include <c10/core/ScalarType.h>

#include <string>
#include <string_view>

namespace kvrl {

// "torch.float32" for kFloat, "torch.bool" for kBool, ...
std::string python_dtype_name(c10::ScalarType type);

// Parses "float32", "float64" or "bfloat16" (the dtypes a module may be converted to).
// Throws InvalidArgumentError naming the value and the allowed names otherwise.
c10::ScalarType parse_module_dtype(std::string_view name);

}  // namespace kvrl
