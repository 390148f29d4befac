#include "learner/gradient_reducer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "common/comm/mpi_communicator.h"
#include "common/support/errors.h"
#include "tests/device_under_test.h"
#include "tests/mpi_once.h"
#ifdef KVRL_HAVE_NCCL
#include "common/comm/nccl_communicator.h"
#endif

namespace kvrl {
namespace {

// Two "learners" in one process: the other one's gradient is `factor` times ours, so the
// mean is ours times (1 + factor) / 2. Records what each start saw.
class ScriptedCommunicator : public Communicator {
 public:
  explicit ScriptedCommunicator(double factor) : factor_(factor) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void all_reduce_mean(std::vector<at::Tensor>& tensors) override {
    for (auto& t : tensors) t.mul_((1 + factor_) / 2);
  }
  void broadcast(std::vector<at::Tensor>&, int) override {}
  double all_reduce_sum(double value) override { return 2 * value; }

  std::unique_ptr<PendingReduction> start_all_reduce_mean(at::Tensor flat) override {
    started_numel.push_back(flat.numel());
    first_parameter_had_grad.push_back(watched.grad().defined());
    return std::make_unique<Pending>(flat, factor_, waited);
  }

  at::Tensor watched;  // a parameter whose gradient each start looks at
  std::vector<int64_t> started_numel;
  std::vector<bool> first_parameter_had_grad;
  int waited = 0;

 private:
  class Pending : public PendingReduction {
   public:
    Pending(at::Tensor flat, double factor, int& waited)
        : flat_(std::move(flat)), factor_(factor), waited_(waited) {}
    void wait() override {
      flat_.mul_((1 + factor_) / 2);
      ++waited_;
    }

   private:
    at::Tensor flat_;
    double factor_;
    int& waited_;
  };
  double factor_;
};

// Three layers; `third` is used only when `use_third`.
struct SmallNet {
  at::Tensor first = torch::randn({4, 8}).requires_grad_();
  at::Tensor second = torch::randn({8, 6}).requires_grad_();
  at::Tensor third = torch::randn({6, 2}).requires_grad_();
  std::vector<at::Tensor> parameters() const { return {first, second, third}; }

  at::Tensor loss(const at::Tensor& x, bool use_third) const {
    at::Tensor h = torch::tanh(torch::tanh(x.matmul(first)).matmul(second));
    return use_third ? h.matmul(third).pow(2).sum() : h.sum();
  }
  void zero() {
    for (auto& p : parameters()) p.mutable_grad() = at::Tensor();
  }
};

std::vector<at::Tensor> plain_gradients(SmallNet& net, const at::Tensor& x, bool use_third) {
  net.zero();
  net.loss(x, use_third).backward();
  std::vector<at::Tensor> grads;
  for (auto& p : net.parameters())
    grads.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  net.zero();
  return grads;
}

TEST(GradientReducer, StartsBucketsDuringBackwardLastLayerFirstAndAveragesThem) {
  torch::manual_seed(0);
  SmallNet net;
  const at::Tensor x = torch::randn({5, 4});
  const std::vector<at::Tensor> expected = plain_gradients(net, x, /*use_third=*/true);
  auto communicator = std::make_shared<ScriptedCommunicator>(3.0);
  communicator->watched = net.first;
  // One byte per bucket: every parameter gets a bucket of its own.
  GradientReducer reducer(net.parameters(), communicator, /*bucket_bytes=*/1);
  ASSERT_EQ(reducer.bucket_count(), 3u);

  reducer.prepare();
  net.loss(x, true).backward();
  // Every gradient was produced, so every bucket started inside backward.
  EXPECT_EQ(reducer.buckets_started_during_backward(), 3u);
  EXPECT_EQ(communicator->waited, 0);
  reducer.finish();
  EXPECT_EQ(communicator->waited, 3);
  // Last layer first, and it went out before backward had reached the first layer.
  EXPECT_EQ(communicator->started_numel, (std::vector<int64_t>{12, 48, 32}));
  EXPECT_FALSE(communicator->first_parameter_had_grad.front());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(torch::allclose(net.parameters()[i].grad(), expected[i] * 2.0)) << "parameter " << i;
  }
}

TEST(GradientReducer, UnusedParametersGoOutAsZerosAfterBackwardInBucketOrder) {
  torch::manual_seed(1);
  SmallNet net;
  const at::Tensor x = torch::randn({5, 4});
  const std::vector<at::Tensor> expected = plain_gradients(net, x, /*use_third=*/false);
  auto communicator = std::make_shared<ScriptedCommunicator>(1.0);
  communicator->watched = net.first;
  GradientReducer reducer(net.parameters(), communicator, /*bucket_bytes=*/1);

  reducer.prepare();
  net.loss(x, false).backward();
  // `third` is the first bucket and never gets a gradient, so nothing may start before it.
  EXPECT_EQ(reducer.buckets_started_during_backward(), 0u);
  reducer.finish();
  EXPECT_EQ(communicator->started_numel, (std::vector<int64_t>{12, 48, 32}));
  EXPECT_TRUE(net.third.grad().defined());
  EXPECT_EQ(net.third.grad().abs().sum().item<float>(), 0.0f);
  EXPECT_TRUE(torch::allclose(net.first.grad(), expected[0]));
  EXPECT_TRUE(torch::allclose(net.second.grad(), expected[1]));
}

TEST(GradientReducer, SharesABucketAndReArmsForEveryBackward) {
  torch::manual_seed(2);
  SmallNet net;
  auto communicator = std::make_shared<ScriptedCommunicator>(0.0);  // the mean halves
  communicator->watched = net.first;
  GradientReducer reducer(net.parameters(), communicator, /*bucket_bytes=*/1 << 20);
  ASSERT_EQ(reducer.bucket_count(), 1u);
  for (int step = 0; step < 2; ++step) {
    const at::Tensor x = torch::randn({5, 4});
    const std::vector<at::Tensor> expected = plain_gradients(net, x, true);
    reducer.prepare();
    net.loss(x, true).backward();
    reducer.finish();
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_TRUE(torch::allclose(net.parameters()[i].grad(), expected[i] * 0.5)) << "step " << step;
    }
    net.zero();
  }
  EXPECT_EQ(communicator->started_numel, (std::vector<int64_t>{92, 92}));
}

TEST(GradientReducer, BackwardOutsidePrepareIsLeftAloneAndFinishWithoutPrepareIsRefused) {
  SmallNet net;
  auto communicator = std::make_shared<ScriptedCommunicator>(1.0);
  communicator->watched = net.first;
  GradientReducer reducer(net.parameters(), communicator, 1);
  net.loss(torch::randn({5, 4}), true).backward();
  EXPECT_TRUE(communicator->started_numel.empty());
  EXPECT_THROW(reducer.finish(), Error);
}

TEST(GradientReducer, RemovesItsHooksWhenDestroyed) {
  SmallNet net;
  auto communicator = std::make_shared<ScriptedCommunicator>(1.0);
  communicator->watched = net.first;
  {
    GradientReducer reducer(net.parameters(), communicator, 1);
    reducer.prepare();
  }
  net.loss(torch::randn({5, 4}), true).backward();  // would reach a destroyed reducer
  EXPECT_TRUE(communicator->started_numel.empty());
}

// One GPU forms only a one-rank communicator, so the mean is the gradient itself: this
// checks that buckets start from autograd's device thread onto the NCCL stream, ordered
// after the backward kernels that wrote them, and land before the step reads them. A
// rehearsal runs it on the CPU over MPI (tests/device_under_test.h).
TEST(GradientReducerOnGpu, BucketsGoOutOnTheNcclStreamDuringBackward_NCCL) {
  test_support::initialize_mpi_once();
  const c10::Device device = test_support::device_under_test();
  torch::manual_seed(3);
  SmallNet net;
  for (at::Tensor* p : {&net.first, &net.second, &net.third}) *p = p->detach().to(device).requires_grad_();
  const at::Tensor x = torch::randn({5, 4}, torch::TensorOptions().device(device));
  const std::vector<at::Tensor> expected = plain_gradients(net, x, true);
  std::shared_ptr<Communicator> communicator = std::make_shared<MpiCommunicator>(MPI_COMM_WORLD);
#ifdef KVRL_HAVE_NCCL
  if (device.is_cuda())
    communicator = std::make_shared<NcclCommunicator>(MPI_COMM_WORLD, device, NcclOptions{});
#endif
  GradientReducer reducer(net.parameters(), communicator, /*bucket_bytes=*/1);
  reducer.prepare();
  net.loss(x, true).backward();
  EXPECT_EQ(reducer.buckets_started_during_backward(), 3u);
  reducer.finish();
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(torch::allclose(net.parameters()[i].grad(), expected[i])) << "parameter " << i;
  }
}

}  // namespace
}  // namespace kvrl
