#include "common/model/scalar_type_names.h"

#include "common/support/errors.h"

namespace kvrl {

std::string python_dtype_name(c10::ScalarType type) {
  return "torch." + std::string(c10::getDtypeNames(type).first);
}

c10::ScalarType parse_module_dtype(std::string_view name) {
  if (name == "float32") return c10::kFloat;
  if (name == "float64") return c10::kDouble;
  if (name == "bfloat16") return c10::kBFloat16;
  throw InvalidArgumentError("dtype '" + std::string(name) +
                             "' is not supported: use float32, float64 or bfloat16");
}

}  // namespace kvrl
