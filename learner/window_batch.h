// Packs episodes and fragments into [B, T] training windows. Each takes its context
// prefix (burn-in tokens: attended over, trained on nothing), its steps, and one token for
// its final observation (the bootstrap state of a truncated episode or of a fragment whose
// episode goes on); several share a row where they fit (first-fit, longest first), every
// row starts at a context start, and prefixes and padding are masked out of every loss.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "common/wire/episode.h"

namespace kvrl {

struct EpisodeSlot {
  int64_t row = 0;
  int64_t offset = 0;   // first step's column; its context prefix fills the columns before it
  int64_t length = 0;   // steps; the final observation sits at offset + length
  int64_t context = 0;  // context prefix tokens before offset
  bool terminated = false;
};

// The tensor dtype of observations stored as `element`: float, or uint8 (kByte).
at::ScalarType observation_scalar_type(ObservationElement element);

struct WindowBatch {
  at::Tensor observations;         // [B, T, O] float, or uint8 for uint8 observations
  at::Tensor actions;              // [B, T, A] float (0 off the steps)
  at::Tensor is_init;              // [B, T] bool: context starts, and every padding token
  at::Tensor step_mask;            // [B, T] bool: tokens that are steps to train on
  at::Tensor rewards;              // [B, T] float
  at::Tensor behaviour_log_probs;  // [B, T] float
  at::Tensor behaviour_values;     // [B, T] float: the acting policy's values
  at::Tensor policy_versions;      // [B, T] long: the version that acted; -1 off the steps
  std::vector<EpisodeSlot> slots;
  std::vector<int64_t> row_tokens;  // per row: tokens before its padding
  std::vector<int64_t> row_steps;   // per row: real steps
  int64_t rows() const { return observations.size(0); }
  // The batch with its tensors on `device` (the learner's); a no-op move when they are there.
  WindowBatch to(c10::Device device) &&;
  int64_t width() const { return observations.size(1); }
};

// Some rows of a batch, cut to the widest of them: the padding all of them end with is
// neither computed nor attended to. Offsets of the batch's slots stay valid.
class WindowRows {
 public:
  // `host_index`: kLong row numbers on the CPU.
  WindowRows(const WindowBatch& batch, at::Tensor host_index);

  // t [B, T, ...] -> [rows, width, ...]
  at::Tensor operator()(const at::Tensor& t) const;
  const at::Tensor& host_index() const { return host_index_; }
  int64_t width() const { return width_; }
  int64_t steps() const { return steps_; }
  int64_t computed_tokens() const { return host_index_.numel() * width_; }

 private:
  at::Tensor host_index_;
  at::Tensor device_index_;
  int64_t width_ = 0;
  int64_t steps_ = 0;
};

// Throws InvalidArgumentError when `episodes` is empty, sizes differ, or an episode needs
// more than max_tokens (its context prefix + its length + 1).
WindowBatch pack_windows(const std::vector<Episode>& episodes, int64_t max_tokens);

}  // namespace kvrl
