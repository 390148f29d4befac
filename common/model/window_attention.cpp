#include "common/model/window_attention.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <map>
#include <string>

#include "common/support/errors.h"

namespace kvrl {
namespace {

void check_plan_arguments(const at::Tensor& mask, int64_t query_tile) {
  if (mask.dim() != 3 || mask.size(-1) != mask.size(-2) || mask.scalar_type() != at::kBool) {
    throw InvalidArgumentError("WindowAttention expects a bool mask [B, T, T], got " +
                               c10::str(mask.scalar_type(), mask.sizes()) + ".");
  }
  if (query_tile <= 0) {
    throw InvalidArgumentError("query_tile (" + std::to_string(query_tile) + ") must be a positive integer.");
  }
}

// [B, heads, T, head_dim] -> [B * T, heads, head_dim]: a token's heads are one row to select.
at::Tensor token_major(const at::Tensor& x) {
  return x.transpose(1, 2).reshape({x.size(0) * x.size(2), x.size(1), x.size(3)});
}

// [B, tiles, T] bool: whether any query of the tile may attend to each key.
at::Tensor allowed_keys_per_tile(const at::Tensor& mask, int64_t query_tile, int64_t tiles) {
  const int64_t pad = tiles * query_tile - mask.size(1);
  const at::Tensor queries = pad == 0 ? mask : at::constant_pad_nd(mask, {0, 0, 0, pad}, 0);
  return queries.view({mask.size(0), tiles, query_tile, mask.size(2)}).any(/*dim=*/2);
}

}  // namespace

int64_t WindowAttention::rounded_span(int64_t needed, int64_t query_tile, int64_t window) {
  int64_t step = query_tile;
  while (needed >= 8 * step) step *= 2;
  return std::min(window, (needed + step - 1) / step * step);
}

std::optional<WindowAttention> WindowAttention::plan(const at::Tensor& mask, int64_t query_tile) {
  check_plan_arguments(mask, query_tile);
  const int64_t batch = mask.size(0);
  const int64_t t = mask.size(-1);
  WindowAttention attention(batch, t, query_tile);
  const int64_t tiles = attention.tiles_per_row();
  const at::Tensor keys_of_tiles = allowed_keys_per_tile(mask, query_tile, tiles);
  // The first and last key each tile may see, and whether the mask allows the diagonal (as
  // every window mask built from is_init does): then every query has a key.
  const at::Tensor host = at::cat({keys_of_tiles.to(at::kByte).argmax(-1).flatten(),
                                   ((t - 1) - keys_of_tiles.flip(-1).to(at::kByte).argmax(-1)).flatten(),
                                   mask.diagonal(0, 1, 2).all().to(at::kLong).view({1})})
                              .to(at::kCPU);
  const int64_t* ranges = host.const_data_ptr<int64_t>();
  if (ranges[2 * batch * tiles] == 0 && !mask.any(-1).all().item<bool>()) return std::nullopt;

  std::map<int64_t, std::vector<TileRange>> by_span;
  for (int64_t tile = 0; tile < batch * tiles; ++tile) {
    const int64_t begin = ranges[tile];
    const int64_t span = rounded_span(ranges[batch * tiles + tile] - begin + 1, query_tile, t);
    // A range moved left to fit in the window only adds keys masked for the whole tile.
    by_span[span].push_back({tile, std::min(begin, t - span)});
  }
  std::vector<int64_t> order(static_cast<size_t>(batch * tiles));
  int64_t position = 0;
  for (const auto& [span, members] : by_span) {
    attention.groups_.push_back(attention.tile_group(mask, span, members));
    for (const TileRange& member : members) order[static_cast<size_t>(member.tile)] = position++;
  }
  attention.tile_order_ = at::tensor(order, at::TensorOptions(at::kLong)).to(mask.device());
  return attention;
}

WindowAttention::TileGroup WindowAttention::tile_group(const at::Tensor& mask, int64_t span,
                                                       const std::vector<TileRange>& members) const {
  const auto n = static_cast<int64_t>(members.size());
  std::vector<int64_t> host(static_cast<size_t>(2 * n));
  for (int64_t i = 0; i < n; ++i) {
    host[static_cast<size_t>(i)] = members[static_cast<size_t>(i)].tile;
    host[static_cast<size_t>(n + i)] = members[static_cast<size_t>(i)].key_start;
  }
  const at::Tensor both = at::tensor(host, at::TensorOptions(at::kLong)).to(mask.device());
  const at::Tensor tiles = both.narrow(0, 0, n);
  const at::Tensor rows = tiles.div(tiles_per_row(), "floor");
  const auto index_options = both.options();
  const at::Tensor keys = both.narrow(0, n, n).view({n, 1}) + at::arange(span, index_options);
  // Queries past the window (the last tile's padding) read the last query's mask row, so
  // that every scored row has an allowed key; their outputs are cut.
  const at::Tensor queries =
      ((tiles - rows * tiles_per_row()) * tile_).view({n, 1}) + at::arange(tile_, index_options);
  const at::Tensor mask_index =
      ((rows.view({n, 1}) * window_ + queries.clamp_max(window_ - 1)) * window_).view({n, tile_, 1}) +
      keys.view({n, 1, span});
  const at::Tensor tile_mask =
      mask.reshape(-1).index_select(0, mask_index.flatten()).view({n, 1, tile_, span});
  return {tiles, (rows.view({n, 1}) * window_ + keys).flatten(), tile_mask, span};
}

at::Tensor WindowAttention::operator()(const at::Tensor& queries, const at::Tensor& keys,
                                       const at::Tensor& values) const {
  const int64_t heads = queries.size(1);
  const int64_t head_dim = queries.size(3);
  const int64_t tiles = tiles_per_row();
  // Token-major layouts, [B * tiles, tile, heads, head_dim] and [B * T, heads, head_dim], so
  // that a tile's queries and a range's keys are rows to select.
  const at::Tensor query_tiles =
      at::constant_pad_nd(queries.transpose(1, 2), {0, 0, 0, 0, 0, tiles * tile_ - window_})
          .reshape({batch_ * tiles, tile_, heads, head_dim});
  const at::Tensor key_tokens = token_major(keys);
  const at::Tensor value_tokens = token_major(values);
  std::vector<at::Tensor> outputs;
  outputs.reserve(groups_.size());
  for (const TileGroup& group : groups_) {
    const int64_t n = group.tiles.size(0);
    auto key_range = [&](const at::Tensor& tokens) {
      return tokens.index_select(0, group.key_index).view({n, group.span, heads, head_dim}).transpose(1, 2);
    };
    outputs.push_back(
        at::scaled_dot_product_attention(query_tiles.index_select(0, group.tiles).transpose(1, 2),
                                         key_range(key_tokens), key_range(value_tokens), group.mask)
            .transpose(1, 2));
  }
  return at::cat(outputs)
      .index_select(0, tile_order_)
      .view({batch_, tiles * tile_, heads, head_dim})
      .narrow(1, 0, window_)
      .transpose(1, 2);
}

double WindowAttention::scored_fraction() const {
  int64_t scored = 0;
  for (const TileGroup& group : groups_) scored += group.tiles.size(0) * tile_ * group.span;
  return static_cast<double>(scored) / static_cast<double>(batch_ * window_ * window_);
}

namespace {

// Context lengths are rounded up to multiples of this (then as rounded_span does), which keeps
// the kernel calls few: on CartPole's early packings 16 ran faster than 8 (one-off timing,
// bench/window_attention.py), the extra padding costing less than the calls it saves.
constexpr int64_t kContextLengthStep = 16;

struct Context {
  int64_t first_token = 0;  // row * T + column
  int64_t length = 0;
};

// The contexts of every row, keyed by their rounded length; empty when every row is one
// context of T tokens.
std::map<int64_t, std::vector<Context>> contexts_by_length(const at::Tensor& is_init) {
  const int64_t batch = is_init.size(0);
  const int64_t t = is_init.size(1);
  const at::Tensor host = is_init.to(at::kCPU).contiguous();
  const bool* starts = host.const_data_ptr<bool>();
  std::map<int64_t, std::vector<Context>> by_length;
  bool whole_rows = true;
  for (int64_t row = 0; row < batch; ++row) {
    int64_t start = 0;
    for (int64_t column = 1; column <= t; ++column) {
      if (column < t && !starts[row * t + column]) continue;
      const int64_t length = column - start;
      whole_rows = whole_rows && length == t;
      const int64_t rounded = length == 1 ? 1 : WindowAttention::rounded_span(length, kContextLengthStep, t);
      by_length[rounded].push_back({row * t + start, length});
      start = column;
    }
  }
  if (whole_rows) by_length.clear();
  return by_length;
}

}  // namespace

SegmentAttention::SegmentAttention(const at::Tensor& is_init) {
  if (is_init.dim() != 2 || is_init.scalar_type() != at::kBool || is_init.size(1) == 0) {
    throw InvalidArgumentError("SegmentAttention expects a bool is_init [B, T] with T > 0, got " +
                               c10::str(is_init.scalar_type(), is_init.sizes()) + ".");
  }
  batch_ = is_init.size(0);
  window_ = is_init.size(1);
  const auto by_length = contexts_by_length(is_init);
  if (by_length.empty()) return;
  std::vector<int64_t> output(static_cast<size_t>(batch_ * window_));
  int64_t offset = 0;
  const auto on_device = at::TensorOptions(at::kLong);
  for (const auto& [length, contexts] : by_length) {
    std::vector<int64_t> tokens;
    tokens.reserve(contexts.size() * static_cast<size_t>(length));
    for (const Context& context : contexts) {
      for (int64_t j = 0; j < length; ++j)
        tokens.push_back(context.first_token + std::min(j, context.length - 1));
      for (int64_t j = 0; j < context.length; ++j)
        output[static_cast<size_t>(context.first_token + j)] = offset + j;
      offset += length;
    }
    groups_.push_back(
        {at::tensor(tokens, on_device).to(is_init.device()), static_cast<int64_t>(contexts.size()), length});
  }
  output_index_ = at::tensor(output, on_device).to(is_init.device());
}

at::Tensor SegmentAttention::operator()(const at::Tensor& queries, const at::Tensor& keys,
                                        const at::Tensor& values) const {
  if (groups_.empty()) {
    return at::scaled_dot_product_attention(queries, keys, values, std::nullopt, /*dropout_p=*/0.0,
                                            /*is_causal=*/true);
  }
  const int64_t heads = queries.size(1);
  const int64_t head_dim = queries.size(3);
  const at::Tensor query_tokens = token_major(queries);
  const at::Tensor key_tokens = token_major(keys);
  const at::Tensor value_tokens = token_major(values);
  std::vector<at::Tensor> outputs;
  outputs.reserve(groups_.size());
  for (const LengthGroup& group : groups_) {
    auto contexts = [&](const at::Tensor& tokens) {
      return tokens.index_select(0, group.token_index)
          .view({group.contexts, group.length, heads, head_dim})
          .transpose(1, 2);
    };
    outputs.push_back(at::scaled_dot_product_attention(contexts(query_tokens), contexts(key_tokens),
                                                       contexts(value_tokens), std::nullopt,
                                                       /*dropout_p=*/0.0,
                                                       /*is_causal=*/true)
                          .transpose(1, 2)
                          .reshape({group.contexts * group.length, heads, head_dim}));
  }
  return at::cat(outputs)
      .index_select(0, output_index_)
      .view({batch_, window_, heads, head_dim})
      .transpose(1, 2);
}

double SegmentAttention::scored_fraction() const {
  if (groups_.empty()) return static_cast<double>(window_ + 1) / (2.0 * static_cast<double>(window_));
  double scored = 0;
  for (const LengthGroup& group : groups_) {
    scored += static_cast<double>(group.contexts * group.length * (group.length + 1)) / 2.0;
  }
  return scored / static_cast<double>(batch_ * window_ * window_);
}

}  // namespace kvrl
