#include "common/model/image_encoder.h"

#include <ATen/ops/relu.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/conv.h>

#include "common/support/errors.h"

namespace kvrl {

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace

ImageEncoder::ImageEncoder(const ImageEncoderOptions& options) : options_(options) {
  const auto& shape = options.image_shape;
  if (shape.size() != 3 || shape[0] < 1 || shape[1] < 1 || shape[2] < 1) {
    throw InvalidArgumentError("ImageEncoder: image_shape " + shape_text(shape) +
                               " must be [height, width, channels], each >= 1");
  }
  if (options.features < 1 || !(options.input_scale > 0)) {
    throw InvalidArgumentError("ImageEncoder: features (" + std::to_string(options.features) +
                               ") and input_scale (" + std::to_string(options.input_scale) + ") must be > 0");
  }
  convolutions_ = torch::nn::Sequential();
  int64_t height = shape[0], width = shape[1], channels = shape[2];
  for (size_t i = 0; i < options.layers.size(); ++i) {
    const ConvLayer& layer = options.layers[i];
    if (layer.kernel > height || layer.kernel > width) {
      throw InvalidArgumentError(
          "ImageEncoder: convolution layer " + std::to_string(i + 1) + " (" + conv_layers_text({layer}) +
          ") gets a " + std::to_string(height) + "x" + std::to_string(width) + " map from the image " +
          shape_text(shape) + ", smaller than its kernel: use fewer layers or smaller kernels and strides");
    }
    convolutions_->push_back(torch::nn::Conv2d(
        torch::nn::Conv2dOptions(channels, layer.channels, layer.kernel).stride(layer.stride)));
    convolutions_->push_back(torch::nn::ReLU());
    height = (height - layer.kernel) / layer.stride + 1;
    width = (width - layer.kernel) / layer.stride + 1;
    channels = layer.channels;
  }
  register_module("convolutions", convolutions_);
  projection_ = register_module("projection", torch::nn::Linear(channels * height * width, options.features));
}

int64_t ImageEncoder::observation_size() const {
  const auto& shape = options_.image_shape;
  return shape[0] * shape[1] * shape[2];
}

at::Tensor ImageEncoder::forward(const at::Tensor& observations) {
  if (observations.dim() < 1 || observations.size(-1) != observation_size()) {
    throw InvalidArgumentError("ImageEncoder: observations must end in " +
                               std::to_string(observation_size()) + " values (the image " +
                               shape_text(options_.image_shape) + "), got " +
                               shape_text(observations.sizes().vec()));
  }
  const auto& shape = options_.image_shape;
  std::vector<int64_t> leading(observations.sizes().begin(), observations.sizes().end() - 1);
  const at::Tensor images = observations.reshape({-1, shape[0], shape[1], shape[2]})
                                .permute({0, 3, 1, 2})
                                .to(projection_->weight.scalar_type())
                                .mul(options_.input_scale);
  const at::Tensor maps = convolutions_->forward(images).flatten(1);
  at::Tensor features = at::relu(projection_->forward(maps));
  leading.push_back(options_.features);
  return features.reshape(leading);
}

}  // namespace kvrl
