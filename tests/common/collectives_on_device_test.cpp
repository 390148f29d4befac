// The learners' collectives and the staged weight broadcast on the device under test
// (tests/device_under_test.h): NCCL on a GPU, MPI in a rehearsal on the CPU, checked
// against MPI's results on values that depend on the rank, the tensor and the element,
// so a wrong bucket offset, dtype or stream order shows. One GPU forms one-rank NCCL
// communicators only; under mpiexec on CPUs the same tests average across ranks.
#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/comm/mpi_communicator.h"
#include "common/comm/mpi_weight_broadcast.h"
#include "common/comm/staged_weights.h"
#include "common/support/errors.h"
#include "tests/device_under_test.h"
#include "tests/mpi_once.h"
#ifdef KVRL_HAVE_NCCL
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "common/comm/nccl_communicator.h"
#include "common/comm/nccl_weight_broadcast.h"
#endif

namespace kvrl {
namespace {

using test_support::device_under_test;
using test_support::initialize_mpi_once;
using test_support::within_deadline;

constexpr double kDeadlineS = 20;  // for anything a test waits on

std::shared_ptr<Communicator> learner_communicator(const c10::Device& device, double timeout_s = 30) {
#ifdef KVRL_HAVE_NCCL
  if (device.is_cuda()) {
    return std::make_shared<NcclCommunicator>(MPI_COMM_WORLD, device,
                                              NcclOptions{/*bucket_bytes=*/256, timeout_s});
  }
#endif
  (void)timeout_s;
  return std::make_shared<MpiCommunicator>(MPI_COMM_WORLD);
}

std::shared_ptr<WeightBroadcastTransport> weight_transport(const c10::Device& device) {
#ifdef KVRL_HAVE_NCCL
  if (device.is_cuda()) return std::make_shared<NcclWeightBroadcast>(MPI_COMM_SELF, device);
#endif
  return std::make_shared<MpiWeightBroadcast>(MPI_COMM_SELF);
}

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// Tensors of three dtypes and shapes whose every element tells rank, tensor and index apart.
std::vector<at::Tensor> rank_dependent_tensors(int rank) {
  const double offset = 1000.0 * (rank + 1);
  return {torch::arange(100, torch::kFloat) * 0.5 + offset,
          (torch::arange(150, torch::kDouble) * -0.25 + offset + 7).view({3, 50}),
          (torch::arange(7, torch::kFloat) + rank).to(torch::kBFloat16)};
}

std::vector<at::Tensor> on(const std::vector<at::Tensor>& tensors, const c10::Device& device) {
  std::vector<at::Tensor> moved;
  moved.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors) moved.push_back(tensor.to(device));
  return moved;
}

void expect_same_values(const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected,
                        const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_EQ(actual[i].scalar_type(), expected[i].scalar_type()) << what << ", tensor " << i;
    // MPI reduces in float32; NCCL in each tensor's own dtype.
    EXPECT_TRUE(
        torch::allclose(actual[i].cpu().to(torch::kDouble), expected[i].to(torch::kDouble), 1e-6, 1e-6))
        << what << ", tensor " << i << ": " << actual[i].cpu().flatten().slice(0, 0, 4) << " vs "
        << expected[i].flatten().slice(0, 0, 4);
  }
}

TEST(CollectivesOnDevice, AllReduceAndBroadcastGiveMpisResultsOnRankDependentTensors_NCCL) {
  initialize_mpi_once();
  const c10::Device device = device_under_test();
  const int rank = world_rank();
  auto communicator = learner_communicator(device);
  MpiCommunicator mpi(MPI_COMM_WORLD);

  std::vector<at::Tensor> reduced = on(rank_dependent_tensors(rank), device);
  std::vector<at::Tensor> expected = rank_dependent_tensors(rank);
  communicator->all_reduce_mean(reduced);  // buckets of 64 floats: several, split by dtype
  mpi.all_reduce_mean(expected);
  expect_same_values(reduced, expected, "all-reduce mean on " + device.str());

  std::vector<at::Tensor> broadcast = on(rank_dependent_tensors(rank), device);
  expected = rank_dependent_tensors(rank);
  communicator->broadcast(broadcast, /*root=*/0);
  mpi.broadcast(expected, 0);
  expect_same_values(broadcast, expected, "broadcast from rank 0 on " + device.str());

  EXPECT_DOUBLE_EQ(communicator->all_reduce_sum(rank + 1.5), mpi.all_reduce_sum(rank + 1.5));
}

// The overlapped gradient path: a bucket started, polled to completion within a deadline.
TEST(CollectivesOnDevice, AStartedReductionLandsWithinItsDeadline_NCCL) {
  initialize_mpi_once();
  const c10::Device device = device_under_test();
  auto communicator = learner_communicator(device);
  MpiCommunicator mpi(MPI_COMM_WORLD);
  const at::Tensor source = torch::arange(4096, torch::kFloat) * (world_rank() + 1) - 3;
  at::Tensor flat = source.to(device);
  std::vector<at::Tensor> expected = {source.clone()};
  mpi.all_reduce_mean(expected);
  auto pending = communicator->start_all_reduce_mean(flat);
  EXPECT_TRUE(within_deadline(kDeadlineS,
                              "a started 4096-element all-reduce on " + device.str() + " to finish",
                              [&] { return pending->progress(); }));
  pending->wait();
  EXPECT_TRUE(torch::allclose(flat.cpu(), expected[0])) << flat.cpu().slice(0, 0, 4);
}

// One rank is the whole broadcast group, so it is the root: this checks that the sender's
// broadcasts all land, and that a joined buffer keeps its parameters and version tag.
TEST(CollectivesOnDevice, AVersionTaggedWeightBroadcastLandsWithItsVersion_NCCL) {
  initialize_mpi_once();
  const c10::Device device = device_under_test();
  auto transport = weight_transport(device);
  const std::vector<at::Tensor> parameters = {torch::randn({3, 4}).to(device), torch::randn({5}).to(device)};
  StagedWeightSender sender(*transport, /*timeout_s=*/kDeadlineS);
  sender.start(parameters, 7);
  sender.start(parameters, 8);
  sender.finish();  // throws after its timeout, naming the version
  EXPECT_EQ(sender.in_flight(), 0u);

  const at::Tensor buffer = weights_with_version(parameters, 9);
  EXPECT_EQ(buffer.device(), device);
  auto pending = transport->join(buffer);
  EXPECT_TRUE(within_deadline(kDeadlineS,
                              "the joined " + transport->name() + " weight broadcast of version 9",
                              [&] { return pending->landed(); }));
  EXPECT_EQ(version_of_weights(buffer), 9);
  EXPECT_TRUE(torch::equal(buffer.narrow(0, 0, 12).view({3, 4}).cpu(), parameters[0].cpu()));
  EXPECT_TRUE(torch::equal(buffer.narrow(0, 12, 5).cpu(), parameters[1].cpu()));
  if (device.is_cuda())
    EXPECT_THROW(transport->join(torch::zeros({4})), InvalidArgumentError);  // not on the GPU
}

#ifdef KVRL_HAVE_NCCL
// Last in this file: the communicator it aborts is its own, but the stalled stream is the
// device's current one. scripts/device-check.sh also runs it in a process of its own.
TEST(CollectivesOnDevice, AStalledAllReduceReachesTheWatchdogWithANamedError_NCCL) {
  initialize_mpi_once();
  const c10::Device device = device_under_test();
  if (!device.is_cuda()) GTEST_SKIP() << "rehearsal: a CPU has no stream to stall and MPI no watchdog";
  auto communicator = learner_communicator(device, /*timeout_s=*/0.5);
  std::vector<at::Tensor> tensors = {torch::ones({64}, torch::TensorOptions().device(device))};
  // A host function that sleeps holds the current stream, which the collective waits for.
  const auto stall = [](void*) { std::this_thread::sleep_for(std::chrono::seconds(3)); };
  ASSERT_EQ(cudaLaunchHostFunc(c10::cuda::getCurrentCUDAStream(device.index()).stream(), stall, nullptr),
            cudaSuccess);
  const auto start = std::chrono::steady_clock::now();
  try {
    communicator->all_reduce_mean(tensors);
    FAIL() << "an all-reduce behind a 3 s stall finished within a 0.5 s timeout";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("still running after"), std::string::npos) << message;
    EXPECT_NE(message.find("learner.nccl_timeout_s"), std::string::npos) << message;
    EXPECT_NE(message.find("learner rank 0"), std::string::npos) << message;
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(waited, 2.5) << "the watchdog waited for the stall instead of timing out";
  torch::cuda::synchronize(device.index());  // let the stall end before the next test
}
#endif

}  // namespace
}  // namespace kvrl
