// Window attention that computes only what the episodes need, in place of one call over
// the whole [B, T, T] mask. SegmentAttention, for packed windows (is_init): each context in
// a row of its own, the fused causal kernel, no mask. WindowAttention, for any bool mask (a
// sliding window's band): query tiles, each over the smallest key range its queries may see.
// Both are exact.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace kvrl {

// Queries per tile where CausalTransformer's window path takes tiles: the smaller, the closer
// each tile's key range follows its episodes; the larger, the fewer calls. 32 beat 16 on
// CartPole packings in a one-off timing with bench/window_attention.py at commit c0ade70,
// when packed windows still went through the tiles.
inline constexpr int64_t kWindowAttentionQueryTile = 32;

// How the queries of a [B, T] window attend, planned once for all layers.
class PlannedAttention {
 public:
  virtual ~PlannedAttention() = default;
  // queries, keys, values [B, heads, T, head_dim] -> attention [B, heads, T, head_dim].
  virtual at::Tensor operator()(const at::Tensor& queries, const at::Tensor& keys,
                                const at::Tensor& values) const = 0;
};

class WindowAttention final : public PlannedAttention {
 public:
  // The plan for a bool window mask [B, T, T] (true = attend) and tiles of `query_tile`
  // queries; nullopt when some query may attend to no key at all (what a kernel returns for
  // such a row is its own convention, so those windows keep the whole-window call). One host
  // copy of two [B, tiles] reductions.
  static std::optional<WindowAttention> plan(const at::Tensor& mask, int64_t query_tile);

  at::Tensor operator()(const at::Tensor& queries, const at::Tensor& keys,
                        const at::Tensor& values) const override;

  // Query-key pairs scored, over the B * T * T of a whole-window call.
  double scored_fraction() const;

  // The key range length a tile of `needed` keys is given: a multiple of the tile below eight
  // tiles, then of a step that doubles as the range doubles (at most a quarter of it), so
  // that lengths fall into a few groups; at most `window`.
  static int64_t rounded_span(int64_t needed, int64_t query_tile, int64_t window);

 private:
  // Tiles whose key ranges have the same length.
  struct TileGroup {
    at::Tensor tiles;      // [n] long: row * tiles_per_row + tile
    at::Tensor key_index;  // [n * span] long: row * T + key position
    at::Tensor mask;       // [n, 1, query_tile, span] bool
    int64_t span = 0;
  };

  struct TileRange {
    int64_t tile = 0;       // row * tiles_per_row + tile
    int64_t key_start = 0;  // the first key of its range
  };

  WindowAttention(int64_t batch, int64_t window, int64_t query_tile)
      : batch_(batch), window_(window), tile_(query_tile) {}
  int64_t tiles_per_row() const { return (window_ + tile_ - 1) / tile_; }
  TileGroup tile_group(const at::Tensor& mask, int64_t span, const std::vector<TileRange>& members) const;

  int64_t batch_;
  int64_t window_;
  int64_t tile_;
  std::vector<TileGroup> groups_;
  at::Tensor
      tile_order_;  // [B * tiles_per_row] long: where each tile's output sits in the groups' concatenation
};

// Rows packed with contexts that start where is_init is true (and at column 0), attended
// context by context without a mask: each context is gathered into a row of its own,
// contexts of about the same length are batched (lengths rounded up as rounded_span does,
// the padding after each context's last token, which causal attention keeps from every
// real token), and each batch runs the fused causal kernel. A row of many short episodes
// costs the sum of their own causal triangles. Exact: the same as the block-diagonal causal
// mask of segment_causal_mask_from_is_init.
class SegmentAttention final : public PlannedAttention {
 public:
  // is_init [B, T] bool. One host copy of it.
  explicit SegmentAttention(const at::Tensor& is_init);

  at::Tensor operator()(const at::Tensor& queries, const at::Tensor& keys,
                        const at::Tensor& values) const override;

  // Every row is one context of T tokens: plain causal attention, no gathering needed.
  bool one_context_per_row() const { return groups_.empty(); }
  // Query-key pairs the causal kernel covers (L(L+1)/2 per context of rounded length L),
  // over the B * T * T of a whole-window call.
  double scored_fraction() const;
  size_t group_count() const { return groups_.size(); }

 private:
  // Contexts gathered into rows of the same (rounded) length.
  struct LengthGroup {
    at::Tensor token_index;  // [contexts * length] long: row * T + token, the last token repeated as padding
    int64_t contexts = 0;
    int64_t length = 0;
  };

  int64_t batch_ = 0;
  int64_t window_ = 0;
  std::vector<LengthGroup> groups_;
  at::Tensor output_index_;  // [B * T] long: each token's output in the groups' concatenation
};

}  // namespace kvrl
