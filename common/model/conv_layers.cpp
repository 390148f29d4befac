#include "common/model/conv_layers.h"

#include <regex>
#include <sstream>

#include "common/support/errors.h"

namespace kvrl {

std::vector<ConvLayer> parse_conv_layers(const std::string& text) {
  static const std::regex layer(R"(\s*(\d{1,6})x(\d{1,4})s(\d{1,4})\s*)");
  std::vector<ConvLayer> layers;
  std::stringstream parts(text);
  std::string part;
  while (std::getline(parts, part, ',')) {
    std::smatch match;
    if (!std::regex_match(part, match, layer)) {
      throw InvalidArgumentError("convolution layer '" + part + "' in '" + text +
                                 "' does not read CHANNELSxKERNELsSTRIDE (e.g. 32x8s4)");
    }
    layers.push_back({std::stoll(match[1]), std::stoll(match[2]), std::stoll(match[3])});
    if (layers.back().channels < 1 || layers.back().kernel < 1 || layers.back().stride < 1) {
      throw InvalidArgumentError("convolution layer '" + part + "' needs channels, kernel and stride >= 1");
    }
  }
  if (layers.empty()) {
    throw InvalidArgumentError("convolution layers '" + text +
                               "': expected at least one, e.g. 32x8s4,64x4s2");
  }
  return layers;
}

std::string conv_layers_text(const std::vector<ConvLayer>& layers) {
  std::string text;
  for (const ConvLayer& l : layers) {
    text += (text.empty() ? "" : ",") + std::to_string(l.channels) + "x" + std::to_string(l.kernel) + "s" +
            std::to_string(l.stride);
  }
  return text;
}

}  // namespace kvrl
