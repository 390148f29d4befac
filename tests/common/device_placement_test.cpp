#include "common/comm/device_placement.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>

#include "common/comm/gradient_buckets.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

TEST(DevicePlacement, ParsesTheConfigFormsAndNamesABadOne) {
  EXPECT_EQ(DeviceRequest::parse("auto").kind, DeviceRequest::Kind::kAuto);
  EXPECT_EQ(DeviceRequest::parse("cpu").kind, DeviceRequest::Kind::kCpu);
  EXPECT_EQ(DeviceRequest::parse("cuda").index, -1);
  EXPECT_EQ(DeviceRequest::parse("cuda:3").index, 3);
  for (const std::string bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "CUDA", "cuda:123456"}) {
    try {
      DeviceRequest::parse(bad);
      FAIL() << bad << " was accepted";
    } catch (const InvalidArgumentError& error) {
      EXPECT_NE(std::string(error.what()).find("device '" + bad + "' must be auto, cpu, cuda or cuda:N"),
                std::string::npos);
    }
  }
}

TEST(DevicePlacement, LocalRankComesFromTheFirstLauncherVariableSet) {
  std::map<std::string, std::string> variables{{"SLURM_LOCALID", "5"}, {"LOCAL_RANK", "7"}};
  auto lookup = [&](const char* name) -> const char* {
    auto found = variables.find(name);
    return found == variables.end() ? nullptr : found->second.c_str();
  };
  EXPECT_EQ(local_rank_from_environment(lookup), 5);
  variables["OMPI_COMM_WORLD_LOCAL_RANK"] = "2";
  EXPECT_EQ(local_rank_from_environment(lookup), 2);
  variables["OMPI_COMM_WORLD_LOCAL_RANK"] = "two";  // unreadable: the next one counts
  EXPECT_EQ(local_rank_from_environment(lookup), 5);
  variables.clear();
  EXPECT_EQ(local_rank_from_environment(lookup), -1);
}

TEST(DevicePlacement, SpreadsRanksOverGpusAndFallsBackToCpuSayingWhy) {
  const DeviceChoice spread = choose_device(DeviceRequest::parse("auto"), 3, 2);
  EXPECT_EQ(spread.device, c10::Device(c10::kCUDA, 1));
  EXPECT_FALSE(spread.fell_back);
  EXPECT_EQ(choose_device(DeviceRequest::parse("cuda"), -1, 4).device, c10::Device(c10::kCUDA, 0));
  EXPECT_EQ(choose_device(DeviceRequest::parse("cuda:1"), 0, 2).device, c10::Device(c10::kCUDA, 1));

  const DeviceChoice none = choose_device(DeviceRequest::parse("auto"), 0, 0);
  EXPECT_TRUE(none.device.is_cpu());
  EXPECT_TRUE(none.fell_back);
  EXPECT_EQ(none.reason, "no usable GPU: running on CPU");
  const DeviceChoice asked = choose_device(DeviceRequest::parse("cuda"), 0, 0);
  EXPECT_TRUE(asked.device.is_cpu() && asked.fell_back);
  EXPECT_EQ(asked.reason, "no usable GPU although the config asks for one: running on CPU");
  const DeviceChoice missing = choose_device(DeviceRequest::parse("cuda:2"), 0, 2);
  EXPECT_TRUE(missing.device.is_cpu() && missing.fell_back);
  EXPECT_EQ(missing.reason, "cuda:2 is configured but only 2 GPU(s) are usable: running on CPU");
  const DeviceChoice cpu = choose_device(DeviceRequest::parse("cpu"), 0, 8);
  EXPECT_TRUE(cpu.device.is_cpu());
  EXPECT_FALSE(cpu.fell_back);
}

TEST(GradientBuckets, GroupInOrderUpToTheSizeAndKeepDtypesApart) {
  const std::vector<at::Tensor> tensors = {torch::zeros({10}),
                                           torch::zeros({20}),
                                           torch::zeros({100}),
                                           torch::zeros({5}),
                                           torch::zeros({5}, torch::kDouble),
                                           torch::zeros({1})};
  const auto buckets = plan_buckets(tensors, int64_t{30} * 4);  // 30 floats
  ASSERT_EQ(buckets.size(), 5u);
  EXPECT_EQ(buckets[0].members, (std::vector<size_t>{0, 1}));  // 30 floats exactly
  EXPECT_EQ(buckets[1].members, (std::vector<size_t>{2}));     // larger than a bucket: alone
  EXPECT_EQ(buckets[2].members, (std::vector<size_t>{3}));
  EXPECT_EQ(buckets[3].members, (std::vector<size_t>{4}));  // another dtype
  EXPECT_EQ(buckets[4].members, (std::vector<size_t>{5}));
  EXPECT_EQ(buckets[0].numel, 30);
  EXPECT_THROW(plan_buckets(tensors, 0), InvalidArgumentError);
}

TEST(GradientBuckets, FlattenAndUnflattenRoundTripEveryTensor) {
  std::vector<at::Tensor> tensors = {torch::randn({3, 4}), torch::randn({7}), torch::randn({2, 2, 2})};
  const std::vector<at::Tensor> originals = {tensors[0].clone(), tensors[1].clone(), tensors[2].clone()};
  for (const TensorBucket& bucket : plan_buckets(tensors, 64)) {
    at::Tensor flat = flatten_bucket(bucket, tensors);
    EXPECT_EQ(flat.dim(), 1);
    EXPECT_EQ(flat.numel(), bucket.numel);
    for (size_t i : bucket.members) tensors[i].zero_();
    unflatten_bucket(flat * 2, bucket, tensors);
  }
  for (size_t i = 0; i < tensors.size(); ++i) EXPECT_TRUE(torch::equal(tensors[i], originals[i] * 2)) << i;
}

}  // namespace
}  // namespace kvrl
