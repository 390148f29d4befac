// The convolutional encoder in front of the transformer for image observations
// (model.encoder = cnn): Nature-CNN-like, convolutions with ReLU, then a linear layer
// with ReLU to `features`. It reads observations as the wire carries them, flattened
// [..., H * W * C] in height-width-channel order, of any dtype (uint8 images stay bytes
// until here), scales them by input_scale and returns [..., features] floats.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/model/conv_layers.h"

namespace kvrl {

struct ImageEncoderOptions {
  std::vector<int64_t> image_shape;                                      // [H, W, C]
  std::vector<ConvLayer> layers = {{32, 8, 4}, {64, 4, 2}, {64, 3, 1}};  // Mnih et al. 2015
  int64_t features = 512;
  double input_scale = 1.0;  // e.g. 1/255 for pixels
};

class ImageEncoder : public torch::nn::Module {
 public:
  // Throws InvalidArgumentError when a size is not positive or the image is too small
  // for the layers (naming the layer and the map it gets).
  explicit ImageEncoder(const ImageEncoderOptions& options);

  at::Tensor forward(const at::Tensor& observations);

  // Values per observation: H * W * C.
  int64_t observation_size() const;
  const ImageEncoderOptions& options() const { return options_; }

 private:
  ImageEncoderOptions options_;
  torch::nn::Sequential convolutions_{nullptr};
  torch::nn::Linear projection_{nullptr};
};

}  // namespace kvrl
