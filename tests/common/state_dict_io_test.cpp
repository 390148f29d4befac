#include "common/io/state_dict_io.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "common/io/torch_file.h"
#include "common/model/causal_transformer.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

using namespace std::string_literals;

class StateDictIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(0);
    options_.input_size = 3;
    options_.hidden_size = 8;
    options_.num_heads = 2;
    options_.max_seq_len = 5;
    path_ =
        (std::filesystem::temp_directory_path() / ("kvrl_state_dict_" + std::to_string(::getpid()) + ".pt"))
            .string();
  }
  void TearDown() override { std::filesystem::remove(path_); }

  CausalTransformerOptions options_;
  std::string path_;
};

TEST_F(StateDictIoTest, RoundTripsEveryParameterByName) {
  CausalTransformer source(options_);
  CausalTransformer target(options_);
  save_state_dict(source, path_);
  load_state_dict_file(target, path_);
  auto expected = source.named_parameters();
  for (const auto& item : target.named_parameters()) {
    EXPECT_TRUE(torch::equal(item.value(), expected[item.key()])) << item.key();
  }
}

TEST_F(StateDictIoTest, RejectsMissingAndUnexpectedKeysAndLeavesTheModuleUnchanged) {
  CausalTransformer module(options_);
  const at::Tensor before = module.named_parameters()["in_proj.weight"].clone();
  auto dict = state_dict_of(module);
  ASSERT_EQ(dict.erase("norm.bias"), 1u);
  dict.insert("norm.gamma", torch::zeros({8}));
  auto generic = c10::impl::toGenericDict(dict);
  for (auto& item : generic) item.setValue(torch::zeros_like(item.value().toTensor()));
  try {
    load_state_dict(module, generic);
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& error) {
    EXPECT_STREQ(
        error.what(),
        "state_dict does not match the module: missing keys [norm.bias], unexpected keys [norm.gamma]");
  }
  EXPECT_TRUE(torch::equal(module.named_parameters()["in_proj.weight"], before));
}

TEST_F(StateDictIoTest, RejectsShapeMismatchNamingTheEntry) {
  CausalTransformer module(options_);
  auto generic = c10::impl::toGenericDict(state_dict_of(module));
  generic.insert_or_assign("pos_emb.weight", torch::zeros({6, 8}));
  try {
    load_state_dict(module, generic);
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(
        std::string(error.what()).find("'pos_emb.weight' has shape [6, 8] but the module expects [5, 8]"),
        std::string::npos);
  }
}

TEST_F(StateDictIoTest, TorchFileRoundTripsPlainContainersAndViews) {
  c10::impl::GenericDict inner(c10::StringType::get(), c10::AnyType::get());
  const at::Tensor base = torch::arange(12, torch::kDouble).view({3, 4});
  inner.insert("column", base.select(1, 2));  // a strided view is written contiguous
  inner.insert("flags", torch::tensor({true, false}));
  inner.insert("bf16", torch::ones({2}, torch::kBFloat16));
  c10::impl::GenericDict root(c10::StringType::get(), c10::AnyType::get());
  root.insert("inner", inner);
  root.insert("name", std::string("float32"));
  root.insert("big", int64_t{1} << 40);
  root.insert("negative", int64_t{-3});
  root.insert("ratio", 0.25);
  root.insert("none", c10::IValue());
  write_torch_file(path_, root);
  const auto back = read_torch_file(path_).toGenericDict();
  EXPECT_EQ(back.at("name").toStringRef(), "float32");
  EXPECT_EQ(back.at("big").toInt(), int64_t{1} << 40);
  EXPECT_EQ(back.at("negative").toInt(), -3);
  EXPECT_EQ(back.at("ratio").toDouble(), 0.25);
  EXPECT_TRUE(back.at("none").isNone());
  const auto inner_back = back.at("inner").toGenericDict();
  EXPECT_TRUE(torch::equal(inner_back.at("column").toTensor(), base.select(1, 2)));
  EXPECT_TRUE(torch::equal(inner_back.at("flags").toTensor(), torch::tensor({true, false})));
  EXPECT_EQ(inner_back.at("bf16").toTensor().scalar_type(), torch::kBFloat16);
}

TEST_F(StateDictIoTest, MissingFileNamesThePath) {
  try {
    read_torch_file("/nonexistent/kvrl.pt");
    FAIL() << "expected MalformedInputError";
  } catch (const MalformedInputError& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/kvrl.pt"), std::string::npos);
  }
}

// The pickle interpreter knows tensors and plain containers only.
TEST(TorchPickle, RejectsGlobalsOutsideTheAllowList) {
  const std::string program = "\x80\x02"s + "cos\nsystem\n(X\x02\x00\x00\x00lst"s + "R.";
  try {
    parse_torch_pickle(
        program, [](const std::string&) { return std::string(); }, "test");
    FAIL() << "expected MalformedInputError";
  } catch (const MalformedInputError& error) {
    EXPECT_NE(std::string(error.what()).find("global 'os system' is not allowed"), std::string::npos);
  }
}

TEST(TorchPickle, RejectsTruncatedAndUnderflowingPrograms) {
  auto no_storage = [](const std::string&) -> std::string { throw MalformedInputError("no storage"); };
  EXPECT_THROW(parse_torch_pickle(std::string("\x80\x02X\x05\x00\x00\x00"
                                              "ab",
                                              9),
                                  no_storage, "t"),
               MalformedInputError);
  EXPECT_THROW(parse_torch_pickle("\x80\x02s.", no_storage, "t"), MalformedInputError);
  EXPECT_THROW(parse_torch_pickle("\x80\x02h\x07.", no_storage, "t"), MalformedInputError);
  EXPECT_THROW(parse_torch_pickle("\x80\x02", no_storage, "t"), MalformedInputError);
}

TEST(TorchPickle, RejectsTensorViewsPastTheirStorage) {
  // _rebuild_tensor_v2(storage of 2 floats, offset 1, size (2,), stride (1,), False, {})
  const std::string program = "\x80\x02"s + "ctorch._utils\n_rebuild_tensor_v2\n(" +
                              "(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x00"
                              "0"s +
                              "X\x03\x00\x00\x00"
                              "cpuK\x02tQ"s +
                              "K\x01K\x02\x85K\x01\x85\x89}tR.";
  auto storage = [](const std::string&) { return std::string(8, '\0'); };
  try {
    parse_torch_pickle(program, storage, "t");
    FAIL() << "expected MalformedInputError";
  } catch (const MalformedInputError& error) {
    EXPECT_NE(std::string(error.what()).find("reaches past its storage"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace kvrl
