// Attention over a masked window that computes only what the mask allows. The queries of
// each row are cut into tiles; a tile attends over the smallest key range that holds every
// key its queries may see, and tiles whose ranges have the same (rounded-up) length run as
// one batched call. A row packed with many short episodes then costs the sum of their own
// triangles instead of T² (a sliding window: its band), and a row holding one episode the
// causal half. Exact: the keys a tile leaves out are masked for every query in it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace kvrl {

// Queries per tile in CausalTransformer's window path: the smaller, the closer each tile's
// key range follows its episodes; the larger, the fewer rows each call gathers. Chosen with
// bench/window_attention.py (docs/benchmarks.md).
inline constexpr int64_t kWindowAttentionQueryTile = 32;

class WindowAttention {
 public:
  // The plan for a bool window mask [B, T, T] (true = attend) and tiles of `query_tile`
  // queries; nullopt when some query may attend to no key at all (what a kernel returns for
  // such a row is its own convention, so those windows keep the whole-window call). One host
  // copy of two [B, tiles] reductions.
  static std::optional<WindowAttention> plan(const at::Tensor& mask, int64_t query_tile);

  // queries, keys, values [B, heads, T, head_dim] -> attention [B, heads, T, head_dim].
  at::Tensor operator()(const at::Tensor& queries, const at::Tensor& keys, const at::Tensor& values) const;

  // Query-key pairs scored, over the B * T * T of a whole-window call.
  double scored_fraction() const;
  // Batched calls per layer.
  size_t group_count() const { return groups_.size(); }

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

}  // namespace kvrl
