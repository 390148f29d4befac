#include "learner/gradient_reducer.h"

#include <ATen/ops/zeros_like.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <utility>

#include "common/support/errors.h"

namespace kvrl {
namespace {

// Runs after autograd has accumulated a parameter's gradient into .grad (once per
// backward, however often the parameter is used).
class AccumulatedHook : public torch::autograd::PostAccumulateGradHook {
 public:
  AccumulatedHook(GradientReducer& reducer, size_t index) : reducer_(reducer), index_(index) {}
  void operator()(const torch::autograd::Variable&) override { reducer_.on_gradient_ready(index_); }

 private:
  GradientReducer& reducer_;
  size_t index_;
};

}  // namespace

GradientReducer::GradientReducer(std::vector<at::Tensor> parameters,
                                 std::shared_ptr<Communicator> communicator, int64_t bucket_bytes)
    : planned_(std::move(parameters)), communicator_(std::move(communicator)) {
  std::reverse(planned_.begin(), planned_.end());
  buckets_ = plan_buckets(planned_, bucket_bytes);
  bucket_of_.resize(planned_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (size_t member : buckets_[b].members) bucket_of_[member] = b;
  }
  missing_.resize(buckets_.size());
  flat_.resize(buckets_.size());
  pending_.resize(buckets_.size());
  for (size_t i = 0; i < planned_.size(); ++i) {
    torch::autograd::impl::set_post_acc_grad_hooks(planned_[i], std::make_unique<AccumulatedHook>(*this, i));
  }
}

GradientReducer::~GradientReducer() {
  for (const at::Tensor& parameter : planned_)
    torch::autograd::impl::set_post_acc_grad_hooks(parameter, nullptr);
}

void GradientReducer::prepare() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    missing_[b] = buckets_[b].members.size();
    flat_[b] = at::Tensor();
    pending_[b].reset();
  }
  next_bucket_ = 0;
  started_during_backward_ = 0;
  caller_ = std::this_thread::get_id();
  armed_ = true;
}

void GradientReducer::on_gradient_ready(size_t index) {
  if (!armed_) return;  // a backward outside prepare()/finish() is not reduced here
  --missing_[bucket_of_[index]];
  // MPI may only be called from the thread it was initialised for: on another thread (a
  // GPU backward) such a communicator's buckets wait for finish().
  if (std::this_thread::get_id() != caller_ && !communicator_->starts_on_any_thread()) return;
  const size_t before = next_bucket_;
  start_ready_buckets();
  started_during_backward_ += next_bucket_ - before;
  for (size_t b = 0; b < next_bucket_; ++b) {
    if (pending_[b]) pending_[b]->progress();
  }
}

std::vector<at::Tensor> GradientReducer::gradients() const {
  std::vector<at::Tensor> grads;
  grads.reserve(planned_.size());
  for (const at::Tensor& parameter : planned_) grads.push_back(parameter.grad());
  return grads;
}

void GradientReducer::start_ready_buckets() {
  while (next_bucket_ < buckets_.size() && missing_[next_bucket_] == 0) {
    flat_[next_bucket_] = flatten_bucket(buckets_[next_bucket_], gradients());
    pending_[next_bucket_] = communicator_->start_all_reduce_mean(flat_[next_bucket_]);
    ++next_bucket_;
  }
}

void GradientReducer::finish() {
  if (!armed_) throw Error("GradientReducer::finish() without prepare()");
  armed_ = false;
  for (at::Tensor& parameter : planned_) {
    if (!parameter.grad().defined()) parameter.mutable_grad() = at::zeros_like(parameter);
  }
  std::fill(missing_.begin(), missing_.end(), 0);
  start_ready_buckets();
  std::vector<at::Tensor> grads = gradients();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    pending_[b]->wait();
    pending_[b].reset();
    unflatten_bucket(flat_[b], buckets_[b], grads);
    flat_[b] = at::Tensor();
  }
}

}  // namespace kvrl
