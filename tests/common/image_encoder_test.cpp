#include "common/model/image_encoder.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/model/actor_critic.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

std::string error_of(const std::function<void()>& run) {
  try {
    run();
  } catch (const InvalidArgumentError& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(ConvLayers, ParseAndPrintTheConfigForm) {
  const std::vector<ConvLayer> nature = {{32, 8, 4}, {64, 4, 2}, {64, 3, 1}};
  EXPECT_EQ(parse_conv_layers("32x8s4,64x4s2,64x3s1"), nature);
  EXPECT_EQ(parse_conv_layers(" 16x3s1 "), (std::vector<ConvLayer>{{16, 3, 1}}));
  EXPECT_EQ(conv_layers_text(nature), "32x8s4,64x4s2,64x3s1");
  for (const std::string bad : {"", "32x8", "32x8s4,,64x4s2", "0x3s1", "16x3s0", "a16x3s1"}) {
    EXPECT_NE(error_of([&] { parse_conv_layers(bad); }), "(no error)") << bad;
  }
  EXPECT_NE(error_of([] { parse_conv_layers("32x8s4,64-4s2"); }).find("'64-4s2'"), std::string::npos);
}

TEST(ImageEncoder, RefusesAnImageTooSmallForItsLayersNamingTheLayer) {
  ImageEncoderOptions options;
  options.image_shape = {10, 10, 4};  // MinAtar's: the Nature CNN's second layer gets a 1x1 map
  const std::string message = error_of([&] { ImageEncoder encoder(options); });
  EXPECT_NE(message.find("layer 2 (64x4s2) gets a 1x1 map"), std::string::npos) << message;
  options.layers = {{16, 3, 1}};
  EXPECT_NO_THROW(ImageEncoder encoder(options));
  options.image_shape = {10, 40};
  EXPECT_NE(error_of([&] { ImageEncoder encoder(options); }).find("[height, width, channels]"),
            std::string::npos);
}

// The encoder reads observations flattened in height-width-channel order, as Gymnasium's
// images are, whatever the leading dims and the dtype.
TEST(ImageEncoder, ConvolvesTheImageInHeightWidthChannelOrder) {
  torch::manual_seed(3);
  ImageEncoderOptions options;
  options.image_shape = {6, 5, 2};
  options.layers = {{3, 3, 2}, {4, 2, 1}};
  options.features = 7;
  options.input_scale = 1.0 / 255;
  ImageEncoder encoder(options);
  torch::NoGradGuard no_grad;
  const at::Tensor pixels = torch::randint(0, 256, {2, 3, 6, 5, 2}, torch::kByte);
  const at::Tensor out = encoder.forward(pixels.reshape({2, 3, 60}));
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{2, 3, 7}));

  auto parameters = encoder.named_parameters();
  at::Tensor x = pixels.reshape({6, 6, 5, 2}).permute({0, 3, 1, 2}).to(torch::kFloat) / 255;
  x = torch::relu(
      torch::conv2d(x, parameters["convolutions.0.weight"], parameters["convolutions.0.bias"], 2));
  x = torch::relu(
      torch::conv2d(x, parameters["convolutions.2.weight"], parameters["convolutions.2.bias"], 1));
  const at::Tensor expected = torch::relu(
      torch::linear(x.flatten(1), parameters["projection.weight"], parameters["projection.bias"]));
  EXPECT_TRUE(torch::allclose(out.reshape({6, 7}), expected, 1e-6, 1e-5));
  // The same values as floats give the same features: bytes are only a storage choice.
  EXPECT_TRUE(torch::equal(encoder.forward(pixels.reshape({6, 60}).to(torch::kFloat)), out.reshape({6, 7})));
  EXPECT_NE(error_of([&] {
              encoder.forward(torch::zeros({2, 59}));
            }).find("must end in 60 values"),
            std::string::npos);
}

ActorCriticOptions image_policy() {
  ActorCriticOptions options;
  options.image_encoder =
      ImageEncoderOptions{.image_shape = {5, 5, 1}, .layers = {{4, 3, 1}}, .features = 16};
  options.transformer.input_size = 16;
  options.transformer.hidden_size = 16;
  options.transformer.num_heads = 2;
  options.transformer.max_seq_len = 16;
  options.num_outputs = 3;
  return options;
}

// Actors step the policy on float observations; learners evaluate windows of the same
// observations stored as bytes: both must see the same policy.
TEST(ImageEncoder, ActingOnFloatsAndEvaluatingBytesAgree) {
  torch::manual_seed(4);
  ActorCritic policy(image_policy());
  EXPECT_EQ(policy.observation_size(), 25);
  torch::NoGradGuard no_grad;
  const int64_t streams = 2, steps = 6;
  const at::Tensor pixels = torch::randint(0, 2, {streams, steps, 25}, torch::kByte);
  at::Generator generator = at::detail::createCPUGenerator(1);
  std::vector<at::Tensor> acted;
  for (int64_t t = 0; t < steps; ++t) {
    const at::Tensor is_init = torch::full({streams}, t == 0, torch::kBool);
    acted.push_back(policy.act(pixels.select(1, t).to(torch::kFloat), is_init, generator, true).values);
  }
  at::Tensor is_init = torch::zeros({streams, steps}, torch::kBool);
  is_init.select(1, 0).fill_(true);
  const at::Tensor window = policy.evaluate(pixels, is_init).values;
  EXPECT_TRUE(torch::allclose(window, torch::stack(acted, 1), 1e-5, 1e-5));
}

TEST(ImageEncoder, ThePolicyRefusesMismatchedSizesAndNormalisation) {
  ActorCriticOptions options = image_policy();
  options.transformer.input_size = 25;
  EXPECT_NE(error_of([&] { ActorCritic policy(options); }).find("must be the image encoder's features (16)"),
            std::string::npos);
  options = image_policy();
  options.normalize_observations = true;
  EXPECT_NE(error_of([&] { ActorCritic policy(options); }).find("normalize_observations does not apply"),
            std::string::npos);
}

}  // namespace
}  // namespace kvrl
