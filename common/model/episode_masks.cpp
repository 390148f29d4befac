#include "common/model/episode_masks.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cummax.h>
#include <ATen/ops/ones.h>

#include "common/model/scalar_type_names.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

void check_is_init(const at::Tensor& is_init) {
  if (is_init.scalar_type() != at::kBool) {
    throw InvalidArgumentError("is_init must be a boolean tensor, got " +
                               python_dtype_name(is_init.scalar_type()) + ".");
  }
  if (is_init.dim() == 0) {
    throw InvalidArgumentError("is_init must have a time dimension [*batch, T], got a 0-d tensor.");
  }
}

}  // namespace

at::Tensor positions_from_is_init(const at::Tensor& is_init) {
  check_is_init(is_init);
  at::Tensor init = is_init.clone();
  init.select(-1, 0).fill_(true);
  at::Tensor index = at::arange(is_init.size(-1), is_init.options().dtype(at::kLong)).expand_as(init);
  at::Tensor last_reset = std::get<0>(at::cummax(index * init, /*dim=*/-1));
  return index - last_reset;
}

at::Tensor segment_causal_mask_from_is_init(const at::Tensor& is_init, int64_t window) {
  check_is_init(is_init);
  at::Tensor segment = is_init.to(at::kLong).cumsum(/*dim=*/-1);
  at::Tensor same_segment = segment.unsqueeze(-1) == segment.unsqueeze(-2);
  const int64_t t = is_init.size(-1);
  at::Tensor causal = at::ones({t, t}, is_init.options()).tril();
  if (window > 0) causal = causal.triu(-(window - 1));
  return same_segment & causal;
}

}  // namespace kvrl
