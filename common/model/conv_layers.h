// The convolution layers of the image encoder (model.cnn_layers) and their config form,
// apart from the encoder so that the config loader reads them without LibTorch (its fuzz
// target builds it alone).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvrl {

struct ConvLayer {
  int64_t channels = 0;
  int64_t kernel = 0;  // square kernels
  int64_t stride = 1;
  bool operator==(const ConvLayer& other) const = default;
};

// "32x8s4,64x4s2,64x3s1": channels x kernel s stride, per layer. Throws
// InvalidArgumentError naming the part that does not read so.
std::vector<ConvLayer> parse_conv_layers(const std::string& text);
std::string conv_layers_text(const std::vector<ConvLayer>& layers);

}  // namespace kvrl
