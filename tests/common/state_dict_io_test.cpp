#include "common/io/state_dict_io.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <vector>

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

// The inputs below once broke the interpreter under libFuzzer (tests/fuzz/torch_pickle_fuzz.cpp,
// tests/fuzz/crashers/torch_pickle/). Each must be refused with MalformedInputError: not
// c10::Error (callers report that as an internal error), undefined behaviour, a leak or a hang.
std::string refusal(const std::string& program, const StorageRecordLoader& storage) {
  try {
    parse_torch_pickle(program, storage, "t");
  } catch (const MalformedInputError& error) {
    return error.what();
  }
  return "accepted";
}

std::string refusal(const std::string& program) {
  return refusal(program, [](const std::string&) -> std::string { throw MalformedInputError("no storage"); });
}

TEST(TorchPickle, RejectsDictKeysThatC10CannotHash) {
  // {None: 1}: Python allows it; c10's dict threw c10::Error.
  EXPECT_NE(refusal("\x80\x02}(NK\x01u."s).find("dict key of type None is not supported"), std::string::npos);
}

TEST(TorchPickle, RejectsContainersThatHoldThemselves) {
  // l = []; l.append(l)
  EXPECT_NE(refusal("\x80\x02]q\x00h\x00"
                    "a."s)
                .find("put into itself"),
            std::string::npos);
  // d = {}; d["self"] = d
  EXPECT_NE(refusal("\x80\x02}q\x00X\x04\x00\x00\x00selfh\x00s."s).find("put into itself"),
            std::string::npos);
  // a = []; b = []; b.append(a); a.append(b)
  EXPECT_NE(refusal("\x80\x02]q\x00]h\x00"
                    "aa."s)
                .find("changed after it was put into another"),
            std::string::npos);
  // A container put into another and then unchanged may be shared: [a, a].
  EXPECT_EQ(refusal("\x80\x02](]q\x00h\x00"
                    "e."s),
            "accepted");
}

TEST(TorchPickle, RejectsNestingDeeperThan256Levels) {
  const auto nested_tuples = [](int depth) { return "\x80\x02N"s + std::string(depth, '\x85') + "."; };
  EXPECT_EQ(refusal(nested_tuples(/*depth=*/256)), "accepted");
  EXPECT_NE(refusal(nested_tuples(/*depth=*/257)).find("nested deeper than 256 levels"), std::string::npos);
  EXPECT_NE(refusal(nested_tuples(/*depth=*/4000)).find("nested deeper than 256 levels"), std::string::npos);
  // Lists nest by APPEND: 300 lists, each appended into the one below it.
  EXPECT_NE(refusal("\x80\x02"s + std::string(300, ']') + std::string(299, 'a') + ".").find("nested deeper"),
            std::string::npos);
}

TEST(TorchPickle, LooksForGlobalsInSharedTuplesOnce) {
  // t0 = (None,), t_i = (t_{i-1}, t_{i-1}) for i < 64, in a list: 64 tuples, 2^63 paths.
  std::string program = "\x80\x02]N\x85q\x00"s;
  for (int i = 1; i < 64; ++i) {
    program += "h"s + static_cast<char>(i - 1) + "\x86q" + static_cast<char>(i);
  }
  EXPECT_EQ(refusal(program + "a."), "accepted");
}

// _rebuild_tensor_v2(a FloatStorage of 4 elements, offset, sizes, strides, False, {}), with
// every number as an 8-byte LONG1.
std::string float_view_program(int64_t offset, const std::vector<int64_t>& sizes,
                               const std::vector<int64_t>& strides) {
  const auto number = [](int64_t value) {
    return "\x8a\x08"s + std::string(reinterpret_cast<const char*>(&value), sizeof(value));
  };
  std::string program = "\x80\x02"s + "ctorch._utils\n_rebuild_tensor_v2\n(" +
                        "(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x00"
                        "0"s +
                        "X\x03\x00\x00\x00"
                        "cpuK\x04tQ"s +
                        number(offset) + "(";
  for (int64_t size : sizes) program += number(size);
  program += "t(";
  for (int64_t stride : strides) program += number(stride);
  return program + "t\x89}tR.";
}

TEST(TorchPickle, RejectsTensorExtentsThatOverflow) {
  const auto storage = [](const std::string&) { return std::string(16, '\0'); };
  constexpr int64_t k2To40 = int64_t{1} << 40;
  EXPECT_EQ(refusal(float_view_program(/*offset=*/1, {3}, {1}), storage), "accepted");
  // (2^40 - 1) * 2^40 overflowed int64 (undefined behaviour) on its way to the bounds check.
  EXPECT_NE(refusal(float_view_program(0, {k2To40}, {k2To40}), storage).find("tensor extent too large"),
            std::string::npos);
  // So did offset + 1.
  EXPECT_NE(refusal(float_view_program(INT64_MAX, {2}, {1}), storage).find("lies outside its storage"),
            std::string::npos);
  // Zero strides kept the extent inside the storage, and LibTorch threw c10::Error on the element count.
  EXPECT_NE(refusal(float_view_program(0, {k2To40, k2To40, k2To40}, {0, 0, 0}), storage).find("too large"),
            std::string::npos);
}

}  // namespace
}  // namespace kvrl
