// Averages a model's gradients over the learners while backward is still running, as
// PyTorch's DistributedDataParallel does: parameters are grouped, in reverse order (the
// order backward reaches them), into flat buckets of at most `bucket_bytes`, and a bucket's
// all-reduce starts as soon as backward has accumulated every gradient in it, so the
// communication of the last layers overlaps the backward of the first ones.
//
// Buckets start strictly in bucket order on every learner (a collective must be started in
// the same order everywhere), so a bucket that is ready early waits for the ones before
// it. Gradients backward never produced (parameters outside the loss) count as zeros and
// go out in finish().
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "common/comm/communicator.h"
#include "common/comm/gradient_buckets.h"

namespace kvrl {

class GradientReducer {
 public:
  // Hooks every parameter's gradient accumulation. Throws InvalidArgumentError when
  // bucket_bytes < 1.
  GradientReducer(std::vector<at::Tensor> parameters, std::shared_ptr<Communicator> communicator,
                  int64_t bucket_bytes);
  ~GradientReducer();  // removes the hooks
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Call before backward: from here on, accumulated gradients start their buckets.
  void prepare();
  // Call after backward: starts the buckets still waiting (missing gradients as zeros),
  // waits for every bucket and writes the means into the parameters' gradients.
  void finish();

  size_t bucket_count() const { return buckets_.size(); }
  // Buckets the last backward started before it returned (the rest started in finish()).
  size_t buckets_started_during_backward() const { return started_during_backward_; }

  // Called by the accumulation hook of planned parameter `index`.
  void on_gradient_ready(size_t index);

 private:
  // Starts the ready buckets that are next in order.
  void start_ready_buckets();
  // The planned parameters' gradients, as flatten_bucket/unflatten_bucket index them.
  std::vector<at::Tensor> gradients() const;

  std::vector<at::Tensor> planned_;  // the parameters in reverse order
  std::shared_ptr<Communicator> communicator_;
  std::vector<TensorBucket> buckets_;
  std::vector<size_t> bucket_of_;  // planned index -> bucket
  std::vector<size_t> missing_;    // per bucket: gradients not accumulated yet
  std::vector<at::Tensor> flat_;   // per bucket: the buffer being reduced
  std::vector<std::unique_ptr<PendingReduction>> pending_;
  size_t next_bucket_ = 0;  // buckets before this one have started
  size_t started_during_backward_ = 0;
  bool armed_ = false;
  std::thread::id caller_;  // the thread that called prepare()
};

}  // namespace kvrl
