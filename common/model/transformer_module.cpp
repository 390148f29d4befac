#include "common/model/transformer_module.h"

#include <ATen/autocast_mode.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <string>

#include "common/model/causal_transformer.h"
#include "common/model/episode_masks.h"
#include "common/model/scalar_type_names.h"
#include "common/support/errors.h"
#ifdef KVRL_HAVE_CUDA
#include "common/model/cuda_step_graph.h"
#endif

namespace kvrl {
namespace {

// Mirrors the reference's recurrent_mode() context: thread-local and scoped, like
// torch's grad mode, so guards on one actor thread never change another's path.
thread_local std::optional<bool> recurrent_mode_override;

std::optional<c10::ScalarType> autocast_dtype(const c10::Device& device) {
  if (at::autocast::is_autocast_enabled(device.type())) {
    return at::autocast::get_autocast_dtype(device.type());
  }
  return std::nullopt;
}

// Accepts is_init shaped like `batch` or like `batch` plus a trailing 1 (TorchRL's
// [*batch, 1] layout) and returns it shaped like `batch`.
at::Tensor is_init_like(const at::Tensor& is_init, c10::IntArrayRef batch, const char* path) {
  if (is_init.scalar_type() != at::kBool) {
    throw InvalidArgumentError("is_init must be a boolean tensor, got " +
                               python_dtype_name(is_init.scalar_type()) + ".");
  }
  const bool trailing_one = is_init.dim() == static_cast<int64_t>(batch.size()) + 1 &&
                            is_init.size(-1) == 1 && is_init.sizes().slice(0, batch.size()) == batch;
  if (trailing_one) return is_init.squeeze(-1);
  if (is_init.sizes() == batch) return is_init;
  throw InvalidArgumentError(std::string("TransformerModule.") + path + ": is_init must have shape " +
                             c10::str(batch) + " or " + c10::str(batch) + "+[1] to match value, got " +
                             c10::str(is_init.sizes()) + ".");
}

std::shared_ptr<Backbone> build_backbone(const TransformerModuleOptions& options,
                                         std::optional<c10::Device> device) {
  if (!options.input_size || !options.hidden_size) {
    throw InvalidArgumentError("input_size and hidden_size must be passed.");
  }
  if (!options.num_heads || !options.max_seq_len) {
    throw InvalidArgumentError("num_heads and max_seq_len must be passed.");
  }
  CausalTransformerOptions backbone_options;
  backbone_options.input_size = *options.input_size;
  backbone_options.hidden_size = *options.hidden_size;
  backbone_options.num_layers = options.num_layers;
  backbone_options.num_heads = *options.num_heads;
  backbone_options.max_seq_len = *options.max_seq_len;
  backbone_options.dim_feedforward = options.dim_feedforward;
  backbone_options.dropout = options.dropout;
  backbone_options.positions = options.positions;
  backbone_options.attention_window = options.attention_window;
  backbone_options.tiled_attention = options.tiled_attention;
  return std::make_shared<CausalTransformer>(backbone_options, device);
}

// The options minus the size arguments, for wrapping a backbone that already has them.
TransformerModuleOptions without_sizes(TransformerModuleOptions options) {
  options.input_size.reset();
  options.hidden_size.reset();
  return options;
}

}  // namespace

RecurrentModeGuard::RecurrentModeGuard(bool recurrent_mode) : previous_(recurrent_mode_override) {
  recurrent_mode_override = recurrent_mode;
}

RecurrentModeGuard::~RecurrentModeGuard() { recurrent_mode_override = previous_; }

std::optional<bool> RecurrentModeGuard::current() { return recurrent_mode_override; }

TransformerModule::TransformerModule(const TransformerModuleOptions& options,
                                     std::optional<c10::Device> device)
    : TransformerModule(build_backbone(options, device), without_sizes(options)) {
  options_ = options;
}

TransformerModule::TransformerModule(std::shared_ptr<Backbone> backbone,
                                     const TransformerModuleOptions& options)
    : options_(options), backbone_(std::move(backbone)) {
  if (options.input_size || options.hidden_size) {
    throw InvalidArgumentError("A transformer instance cannot be passed along with size arguments.");
  }
  if (!backbone_) {
    throw InvalidArgumentError(
        "The transformer backbone is null; pass a Backbone such as CausalTransformer.");
  }
  const std::pair<const char*, int64_t> attributes[] = {{"num_layers", backbone_->num_layers()},
                                                        {"num_heads", backbone_->num_heads()},
                                                        {"head_dim", backbone_->head_dim()},
                                                        {"max_seq_len", backbone_->max_seq_len()}};
  for (const auto& [name, value] : attributes) {
    if (value <= 0) {
      throw InvalidArgumentError(std::string("The transformer backbone's ") + name + " (" +
                                 std::to_string(value) +
                                 ") must be positive; see CausalTransformer for the backbone contract.");
    }
  }
  register_module("transformer", backbone_);
}

bool TransformerModule::recurrent_mode() const {
  return RecurrentModeGuard::current().value_or(options_.default_recurrent_mode);
}

at::Tensor TransformerModule::forward(const at::Tensor& value, const at::Tensor& is_init) {
  return recurrent_mode() ? window(value, is_init) : step(value, is_init);
}

void TransformerModule::reset_cache() {
  kv_cache_.reset();
  positions_ = at::Tensor();
  cache_dtype_.reset();
  weights_version_.clear();
  step_graph_.reset();
}

void TransformerModule::mark_weight_update() { reset_cache(); }

void TransformerModule::keep_cache_across_weight_update() {
  if (kv_cache_) weights_version_ = current_weights_version();
}

TransformerModule::WeightsVersion TransformerModule::current_weights_version() const {
  WeightsVersion version;
  for (const auto& parameter : backbone_->parameters()) {
    version.emplace_back(parameter.data_ptr(), parameter._version());
  }
  return version;
}

bool TransformerModule::cache_is_stale(const c10::Device& device) const {
  return !positions_.defined() || positions_.device() != device || autocast_dtype(device) != cache_dtype_ ||
         current_weights_version() != weights_version_;
}

void TransformerModule::allocate_state(const c10::Device& device, int64_t streams) {
  // Allocate outside inference mode so the state stays writable after the caller's guard.
  c10::InferenceMode not_inference(/*enabled=*/false);
  cache_dtype_ = autocast_dtype(device);
  kv_cache_ = backbone_->new_kv_cache(streams, device, cache_dtype_);
  positions_ = at::zeros({streams}, at::TensorOptions().dtype(at::kLong).device(device));
  weights_version_ = current_weights_version();
  step_graph_.reset();  // it reads the old cache and positions
}

bool TransformerModule::ensure_fresh_state(const at::Tensor& value) {
  const int64_t batch_size = value.size(0);
  if (!cache_is_stale(value.device()) && positions_.size(0) == batch_size) return false;
  allocate_state(value.device(), batch_size);
  return true;
}

void TransformerModule::ensure_stream_rows(const c10::Device& device, int64_t streams) {
  if (cache_is_stale(device)) {
    allocate_state(device, std::max(streams, positions_.defined() ? positions_.size(0) : 0));
    next_position_bound_ = 0;
    return;
  }
  if (positions_.size(0) >= streams) return;
  c10::InferenceMode not_inference(/*enabled=*/false);
  kv_cache_ = backbone_->resize_kv_cache(*kv_cache_, streams);
  at::Tensor positions = at::zeros({streams}, positions_.options());
  positions.narrow(0, 0, positions_.size(0)).copy_(positions_);
  positions_ = positions;
  step_graph_.reset();
}

int64_t TransformerModule::check_stream_ids(const at::Tensor& value, const at::Tensor& stream_ids) const {
  if (value.dim() != 2) {
    throw InvalidArgumentError(
        "TransformerModule.step_streams: value must be [streams, features], got shape " +
        c10::str(value.sizes()) + ".");
  }
  if (stream_ids.scalar_type() != at::kLong || stream_ids.dim() != 1 || stream_ids.size(0) != value.size(0)) {
    throw InvalidArgumentError("TransformerModule.step_streams: stream_ids must be a long tensor of shape [" +
                               std::to_string(value.size(0)) + "], got " +
                               c10::str(stream_ids.scalar_type(), stream_ids.sizes()) + ".");
  }
  if (!backbone_->has_stream_steps()) {
    throw InvalidArgumentError(
        "TransformerModule.step_streams: this backbone cannot step a subset of its streams; step the whole "
        "batch with step().");
  }
  const at::Tensor host_ids = stream_ids.to(at::kCPU);
  const auto ids = host_ids.accessor<int64_t, 1>();
  if (ids.size(0) == 0) throw InvalidArgumentError("TransformerModule.step_streams: no stream to step.");
  std::vector<int64_t> sorted(ids.size(0));
  for (int64_t i = 0; i < ids.size(0); ++i) sorted[i] = ids[i];
  std::sort(sorted.begin(), sorted.end());
  if (sorted.front() < 0) {
    throw InvalidArgumentError("TransformerModule.step_streams: stream ids must be non-negative, got " +
                               std::to_string(sorted.front()) + ".");
  }
  if (const auto twin = std::adjacent_find(sorted.begin(), sorted.end()); twin != sorted.end()) {
    throw InvalidArgumentError("TransformerModule.step_streams: stream id " + std::to_string(*twin) +
                               " appears twice; each stream steps at most once per call.");
  }
  return sorted.back();
}

at::Tensor TransformerModule::step_streams(const at::Tensor& value, const at::Tensor& is_init,
                                           const at::Tensor& stream_ids) {
  const int64_t largest_id = check_stream_ids(value, stream_ids);
  const at::Tensor init = is_init_like(is_init, value.sizes().slice(0, 1), "step_streams").to(value.device());
  torch::NoGradGuard no_grad;
  ensure_stream_rows(value.device(), largest_id + 1);
  stepped_from_graph_ = false;
  const at::Tensor rows = stream_ids.to(value.device());
  const at::Tensor restart = at::zeros({positions_.size(0)}, init.options()).index_put_({rows}, init);
  kv_cache_ = backbone_->reset_kv_cache(kv_cache_, restart);
  const at::Tensor positions = positions_.index_select(0, rows).masked_fill(init, 0);
  const at::Tensor out = backbone_->stream_step(value.unsqueeze(1), positions, rows, *kv_cache_);
  // In place: a captured full-batch step graph keeps reading these positions, and its
  // bound stays above them (a stream moves at most one position per call).
  positions_.index_copy_(0, rows, positions + 1);
  ++next_position_bound_;
  return out.squeeze(1);
}

at::Tensor TransformerModule::step(const at::Tensor& value, const at::Tensor& is_init) {
  if (value.dim() == 0) {
    throw InvalidArgumentError("TransformerModule.step: value must be [*batch, features], got a 0-d tensor.");
  }
  const c10::IntArrayRef batch = value.sizes().slice(0, value.dim() - 1);
  const at::Tensor stream_init = is_init_like(is_init, batch, "step").reshape(-1);
  const at::Tensor features = value.reshape({-1, 1, value.size(-1)});

  torch::NoGradGuard no_grad;
  const bool fresh = ensure_fresh_state(features);
  const at::Tensor init = fresh ? at::ones_like(stream_init) : stream_init;
  const at::Tensor out = uses_static_step(features.device()) ? static_shape_step(features, init, fresh)
                                                             : eager_step(features, init);
  std::vector<int64_t> out_shape(batch.begin(), batch.end());
  out_shape.push_back(out.size(-1));
  return out.view(out_shape);
}

at::Tensor TransformerModule::eager_step(const at::Tensor& features, const at::Tensor& init) {
  stepped_from_graph_ = false;
  kv_cache_ = backbone_->reset_kv_cache(kv_cache_, init);
  const at::Tensor positions = positions_.masked_fill(init, 0);
  BackboneOutput result = backbone_->forward(features, positions.unsqueeze(-1), std::nullopt, kv_cache_);
  kv_cache_ = std::move(result.kv_cache);
  positions_ = positions + 1;
  return result.out;
}

bool TransformerModule::uses_static_step(const c10::Device& device) const {
  if (!backbone_->has_static_step()) return false;
#ifdef KVRL_HAVE_CUDA
  if (options_.cuda_graphs && device.is_cuda() && !graph_capture_failed_) return true;
#endif
  (void)device;
  return options_.static_shape_steps;
}

void TransformerModule::bound_next_position(const at::Tensor& init, bool fresh) {
  if (backbone_->attention_window() > 0) return;  // a sliding window has no last position
  const int64_t max_seq_len = backbone_->max_seq_len();
  next_position_bound_ = fresh ? 0 : next_position_bound_ + 1;
  if (next_position_bound_ < max_seq_len) return;
  // One host sync per step only while some stream may be at its last slots.
  next_position_bound_ = positions_.masked_fill(init, 0).max().item<int64_t>();
  if (next_position_bound_ >= max_seq_len) throw sequence_too_long(max_seq_len);
}

// The streams' positions are updated in place, so a captured graph keeps reading them.
at::Tensor TransformerModule::run_static_step(const at::Tensor& features, const at::Tensor& init) {
  // Restarted streams need no cleared cache here: slots past a stream's position are
  // masked, and each slot is written before the step that first attends to it.
  positions_.masked_fill_(init, 0);
  at::Tensor out = backbone_->static_step(features, positions_, *kv_cache_);
  positions_.add_(1);
  return out;
}

at::Tensor TransformerModule::static_shape_step(const at::Tensor& features, const at::Tensor& init,
                                                bool fresh) {
  bound_next_position(init, fresh);
  stepped_from_graph_ = false;
#ifdef KVRL_HAVE_CUDA
  if (options_.cuda_graphs && features.is_cuda()) {
    if (!step_graph_) capture_step_graph(features, init);
    if (step_graph_) {
      stepped_from_graph_ = true;
      return step_graph_->replay(features, init);
    }
    return eager_step(features, init);
  }
#endif
  return run_static_step(features, init);
}

void TransformerModule::capture_step_graph(const at::Tensor& features, const at::Tensor& init) {
#ifdef KVRL_HAVE_CUDA
  try {
    step_graph_ = CudaStepGraph::capture(
        [this](const at::Tensor& f, const at::Tensor& i) { return run_static_step(f, i); }, features, init,
        positions_);
  } catch (const std::exception& error) {
    graph_capture_failed_ = true;
    if (options_.warn) {
      options_.warn("CUDA graph capture of the cached step failed for " + std::to_string(features.size(0)) +
                    " stream(s) (" + error.what() + "): stepping without graphs (model.cuda_graphs)");
    }
  }
#else
  (void)features;
  (void)init;
#endif
}

void TransformerModule::prefill(const at::Tensor& value, const at::Tensor& lengths) {
  if (value.dim() != 3) {
    throw InvalidArgumentError("TransformerModule.prefill: value must be [streams, T, features], got shape " +
                               c10::str(value.sizes()) + ".");
  }
  if (lengths.scalar_type() != at::kLong || lengths.dim() != 1 || lengths.size(0) != value.size(0)) {
    throw InvalidArgumentError("TransformerModule.prefill: lengths must be a long tensor of shape [" +
                               std::to_string(value.size(0)) + "], got " +
                               c10::str(lengths.scalar_type(), lengths.sizes()) + ".");
  }
  if (lengths.numel() > 0 &&
      (lengths.min().item<int64_t>() < 0 || lengths.max().item<int64_t>() > value.size(1))) {
    throw InvalidArgumentError(
        "TransformerModule.prefill: lengths must be in [0, T=" + std::to_string(value.size(1)) + "], got " +
        c10::str(lengths.min().item<int64_t>()) + " to " + c10::str(lengths.max().item<int64_t>()) + ".");
  }
  torch::NoGradGuard no_grad;
  ensure_fresh_state(value);
  backbone_->prefill_kv_cache(value, lengths.to(value.device()), *kv_cache_);
  // In place: a captured step graph keeps reading these positions.
  positions_.copy_(lengths);
  next_position_bound_ = lengths.numel() > 0 ? lengths.max().item<int64_t>() - 1 : -1;
}

at::Tensor TransformerModule::window(const at::Tensor& value, const at::Tensor& is_init) {
  if (value.dim() < 2) {
    throw InvalidArgumentError(
        "TransformerModule(recurrent_mode=True) requires the input to have at least one batch "
        "dim (time): value must be [*batch, T, features], got shape " +
        c10::str(value.sizes()) + ".");
  }
  const c10::IntArrayRef batch = value.sizes().slice(0, value.dim() - 1);
  const int64_t t = batch.back();
  const at::Tensor window_init = is_init_like(is_init, batch, "window").reshape({-1, t});
  const at::Tensor features = value.reshape({-1, t, value.size(-1)});

  if (options_.validate_windows && !window_init.select(-1, 0).all().item<bool>()) {
    throw InvalidArgumentError(
        "TransformerModule(recurrent_mode=True) expects episode-aligned windows: every row must "
        "start with is_init=True. Sample complete trajectories or include the beginning of the "
        "episode in the window.");
  }
  const at::Tensor positions = positions_from_is_init(window_init);
  at::Tensor out = backbone_->forward_packed(features, positions, window_init).out;

  std::vector<int64_t> out_shape(batch.begin(), batch.end());
  out_shape.push_back(out.size(-1));
  return out.view(out_shape);
}

std::shared_ptr<torch::nn::Module> TransformerModule::clone(
    const std::optional<torch::Device>& device) const {
  auto backbone = std::dynamic_pointer_cast<Backbone>(backbone_->clone(device));
  TORCH_INTERNAL_ASSERT(backbone, "a Backbone's clone() must return a Backbone");
  auto copy = std::make_shared<TransformerModule>(std::move(backbone), without_sizes(options_));
  copy->options_ = options_;
  copy->train(is_training());
  return copy;
}

}  // namespace kvrl
