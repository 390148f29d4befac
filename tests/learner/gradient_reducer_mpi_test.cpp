// Run by CTest under mpiexec with two ranks (tests/CMakeLists.txt): the overlapped
// gradient all-reduce over real MPI against the blocking one.
#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "common/comm/mpi_communicator.h"
#include "learner/gradient_reducer.h"
#include "learner/normalizer_statistics.h"
#include "tests/mpi_once.h"

namespace kvrl {
namespace {

using test_support::initialize_mpi_once;

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// Whether every rank holds bitwise the same tensor.
bool identical_on_every_rank(const at::Tensor& tensor) {
  at::Tensor mine = tensor.contiguous();
  at::Tensor root = mine.clone();
  MPI_Bcast(root.data_ptr<float>(), static_cast<int>(root.numel()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  int same = torch::equal(mine, root) ? 1 : 0, all_same = 0;
  MPI_Allreduce(&same, &all_same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all_same == 1;
}

// A few layers with data that differs by rank, as learners' minibatches do.
struct RankNet {
  std::vector<at::Tensor> layers;
  explicit RankNet(int64_t width) {
    torch::manual_seed(7);  // the same weights on every rank
    for (int i = 0; i < 4; ++i) layers.push_back(torch::randn({width, width}).div_(8).requires_grad_());
  }
  void backward(int rank) const {
    torch::manual_seed(100 + rank);
    at::Tensor h = torch::randn({16, layers.front().size(0)});
    for (const auto& w : layers) h = torch::tanh(h.matmul(w));
    h.pow(2).sum().backward();
  }
  std::vector<at::Tensor> grads() const {
    std::vector<at::Tensor> g;
    for (const auto& w : layers) g.push_back(w.grad().clone());
    return g;
  }
  void zero() {
    for (auto& w : layers) w.mutable_grad() = at::Tensor();
  }
};

TEST(GradientReducerOverMpi, MatchesTheBlockingAllReduceAndIsBitIdentical_MPI) {
  initialize_mpi_once();
  const int rank = world_rank();
  auto communicator = std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, /*bucket_bytes=*/64 * 64 * 4);
  ASSERT_EQ(communicator->size(), 2);
  RankNet net(64);

  net.backward(rank);
  std::vector<at::Tensor> blocking = net.grads();
  communicator->all_reduce_mean(blocking);
  net.zero();

  GradientReducer reducer(net.layers, communicator, int64_t{64} * 64 * 4);
  ASSERT_EQ(reducer.bucket_count(), 4u);
  reducer.prepare();
  net.backward(rank);
  EXPECT_EQ(reducer.buckets_started_during_backward(), 4u);
  reducer.finish();
  for (size_t i = 0; i < net.layers.size(); ++i) {
    const at::Tensor& overlapped = net.layers[i].grad();
    EXPECT_TRUE(torch::allclose(overlapped, blocking[i], 1e-6, 1e-7)) << "layer " << i;
    EXPECT_TRUE(identical_on_every_rank(overlapped)) << "layer " << i;
  }
  // The mean really mixes both ranks: it differs from this rank's own gradient.
  net.zero();
  net.backward(rank);
  EXPECT_FALSE(torch::allclose(net.layers[0].grad(), blocking[0]));
}

TEST(GradientReducerOverMpi, SeveralReductionsInFlightCompleteInAnyOrder_MPI) {
  initialize_mpi_once();
  const int rank = world_rank();
  MpiCommunicator communicator(MPI_COMM_WORLD);
  std::vector<at::Tensor> buffers;
  std::vector<std::unique_ptr<PendingReduction>> pending;
  for (int i = 0; i < 3; ++i) {
    buffers.push_back(torch::full({int64_t{1000} * (i + 1)}, static_cast<float>(rank + 1) * (i + 1)));
    pending.push_back(communicator.start_all_reduce_mean(buffers.back()));
  }
  for (auto& p : pending) p->progress();
  // Rank 0 moves them along in reverse until all are done, the others wait in order: each
  // reduction's messages must keep to their own reduction (its tag), whatever order the
  // ranks post their steps in.
  if (rank == 0) {
    bool all_done = false;
    while (!all_done) {
      all_done = true;
      for (auto p = pending.rbegin(); p != pending.rend(); ++p) all_done = (*p)->progress() && all_done;
    }
  }
  for (auto& p : pending) p->wait();
  for (int i = 0; i < 3; ++i) {
    const float mean_rank_plus_one = (static_cast<float>(communicator.size()) + 1) / 2;
    EXPECT_TRUE(torch::equal(buffers[i], torch::full_like(buffers[i], mean_rank_plus_one * (i + 1))))
        << "buffer " << i;
  }
}

// The mean goes around a ring in slices of ceil(n / learners) elements: lengths that do
// not split evenly (padded) and a single element come back whole, exact where the sums
// are, and the same on every rank. CTest runs this with 2 and with 3 ranks.
TEST(GradientReducerOverMpi, BuffersOfAnyLengthComeBackWholeAndIdentical_MPI) {
  initialize_mpi_once();
  const int rank = world_rank();
  MpiCommunicator communicator(MPI_COMM_WORLD, /*bucket_bytes=*/int64_t{4} * 333);
  const float ranks = static_cast<float>(communicator.size());
  for (int64_t length : {1, 2, 3, 1001}) {
    // Means over ranks of (rank + 1) * i and of 2 * rank - 1.
    std::vector<at::Tensor> tensors{torch::arange(length, torch::kFloat).mul_(static_cast<float>(rank + 1)),
                                    torch::full({length}, static_cast<float>(rank) * 2 - 1)};
    communicator.all_reduce_mean(tensors);
    EXPECT_TRUE(torch::equal(tensors[0], torch::arange(length, torch::kFloat).mul_((ranks + 1) / 2)))
        << length;
    EXPECT_TRUE(torch::equal(tensors[1], torch::full({length}, ranks - 2))) << length;
    EXPECT_TRUE(identical_on_every_rank(tensors[0])) << length;
  }
  // Sums that round: still the same bits everywhere, and within float error of the mean.
  torch::manual_seed(11);
  const at::Tensor all = torch::randn({communicator.size(), 1001});
  at::Tensor mine = all[rank].clone();
  communicator.start_all_reduce_mean(mine)->wait();
  EXPECT_TRUE(identical_on_every_rank(mine));
  EXPECT_TRUE(torch::allclose(mine, all.mean(0), 1e-6, 1e-6));
}

// The normalisers' statistics over every learner's rows, one of which may have none, are
// those of all the rows together, and the same on every learner.
TEST(NormalizerStatisticsOverMpi, EqualTheMomentsOfEveryLearnersRowsTogether_MPI) {
  initialize_mpi_once();
  MpiCommunicator communicator(MPI_COMM_WORLD);
  const int size = communicator.size();
  auto rows_of = [](int rank) {
    torch::manual_seed(300 + rank);
    const int64_t count = rank == 1 ? 0 : 50 + 13 * rank;
    return (torch::randn({count, 5}) * (1 + rank) + 100 * rank).to(torch::kDouble);
  };
  std::vector<at::Tensor> everyone;
  everyone.reserve(static_cast<size_t>(size));
  for (int rank = 0; rank < size; ++rank) everyone.push_back(rows_of(rank));
  const at::Tensor all = torch::cat(everyone);
  const BatchMoments moments =
      all_learner_moments(rows_of(world_rank()).to(torch::kFloat), communicator, torch::kCPU);
  EXPECT_DOUBLE_EQ(moments.count, static_cast<double>(all.size(0)));
  EXPECT_TRUE(torch::allclose(moments.mean, all.mean(0), 1e-6, 1e-4)) << moments.mean - all.mean(0);
  EXPECT_TRUE(torch::allclose(moments.var, all.var(0, /*unbiased=*/false), 1e-5, 1e-4))
      << moments.var - all.var(0, false);
  EXPECT_TRUE(identical_on_every_rank(moments.mean.to(torch::kFloat)));
  EXPECT_TRUE(identical_on_every_rank(moments.var.to(torch::kFloat)));
}

}  // namespace
}  // namespace kvrl
