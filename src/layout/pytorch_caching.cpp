// Simulation of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, release
// 1.13, default settings: no max_split_size, no roundup_power2_divisions, one stream, no
// empty_cache) replaying the allocations and frees of one order. Its layout is where the blocks
// land when the segments are laid end to end in creation order; its figure is the peak reserved.
#include <algorithm>
#include <numeric>
#include <set>
#include <tuple>

#include "best_fit_gap.h"
#include "roam/layout.h"

namespace roam {

namespace {

// ---- The allocator's constants (same names and values as CUDACachingAllocator.cpp) ----
// Every request is rounded up to a multiple of this (and is at least this). With a plan
// alignment larger than 512 the rounding unit is lcm(512, alignment), i.e. max(512, alignment)
// for the power-of-two alignments roam uses, so that every block offset stays aligned.
constexpr uint64_t kMinBlockSize = 512;
// Largest "small" request: rounded requests <= 1 MiB are served from the small pool.
constexpr uint64_t kSmallSize = 1048576;
// Small-pool segments are 2 MiB ("small" allocations are packed in 2 MiB blocks).
constexpr uint64_t kSmallBuffer = 2097152;
// Large requests below kMinLargeAlloc get a 20 MiB segment that later requests may share.
constexpr uint64_t kLargeBuffer = 20971520;
// Large requests of at least 10 MiB get a segment of their own size rounded up to kRoundLarge.
constexpr uint64_t kMinLargeAlloc = 10485760;
// Rounding of the segment of a request >= kMinLargeAlloc: 2 MiB.
constexpr uint64_t kRoundLarge = 2097152;
// Splitting (should_split): a small-pool block is split when the remainder is >= kMinBlockSize,
// a large-pool block when the remainder is > kSmallSize; otherwise the whole block is handed out.

struct Block {
  uint64_t addr = 0;   // arena offset: segment base + offset inside the segment
  uint64_t size = 0;
  int32_t prev = -1;   // neighbouring blocks of the same segment, -1 at the segment's ends
  int32_t next = -1;
  bool small = false;  // pool of its segment
  bool allocated = false;
};

// Free blocks of one pool ordered like PyTorch's BlockComparator: by (size, address); the block
// index rides along so that a lookup yields the block.
using FreePool = std::set<std::tuple<uint64_t, uint64_t, int32_t>>;

class CachingAllocator {
 public:
  explicit CachingAllocator(uint64_t unit) : unit_(unit) {}

  // malloc(): returns the index of the allocated block.
  int32_t allocate(uint64_t request) {
    const uint64_t size = round_size(request);
    const bool small = size <= kSmallSize;  // get_pool()
    FreePool& pool = pool_of(small);
    int32_t b = -1;
    // get_free_block(): best fit, the smallest free block >= size, lowest address among equals.
    auto it = pool.lower_bound({size, 0, 0});
    if (it != pool.end()) {
      b = std::get<2>(*it);
      pool.erase(it);
    } else {
      // alloc_block(): a new segment, placed right after the previous ones in the arena.
      Block seg;
      seg.addr = reserved_;
      seg.size = align_up(allocation_size(size), unit_);
      seg.small = small;
      reserved_ += seg.size;
      b = static_cast<int32_t>(blocks_.size());
      blocks_.push_back(seg);
    }
    // should_split(): the allocation keeps the low end, the remainder becomes a free block.
    const uint64_t remaining = blocks_[b].size - size;
    if (small ? remaining >= kMinBlockSize : remaining > kSmallSize) {
      Block rest;
      rest.addr = blocks_[b].addr + size;
      rest.size = remaining;
      rest.prev = b;
      rest.next = blocks_[b].next;
      rest.small = small;
      const auto r = static_cast<int32_t>(blocks_.size());
      blocks_.push_back(rest);
      if (rest.next >= 0) blocks_[rest.next].prev = r;
      blocks_[b].next = r;
      blocks_[b].size = size;
      pool.insert({remaining, rest.addr, r});
    }
    blocks_[b].allocated = true;
    return b;
  }

  // free_block(): merge with free neighbours of the same segment, back to the pool.
  void free(int32_t b) {
    blocks_[b].allocated = false;
    FreePool& pool = pool_of(blocks_[b].small);
    const int32_t p = blocks_[b].prev;
    if (p >= 0 && !blocks_[p].allocated) {
      pool.erase({blocks_[p].size, blocks_[p].addr, p});
      blocks_[p].size += blocks_[b].size;
      blocks_[p].next = blocks_[b].next;
      if (blocks_[p].next >= 0) blocks_[blocks_[p].next].prev = p;
      b = p;  // the merged block lives on in p's slot; b's slot is dead
    }
    const int32_t q = blocks_[b].next;
    if (q >= 0 && !blocks_[q].allocated) {
      pool.erase({blocks_[q].size, blocks_[q].addr, q});
      blocks_[b].size += blocks_[q].size;
      blocks_[b].next = blocks_[q].next;
      if (blocks_[b].next >= 0) blocks_[blocks_[b].next].prev = b;
    }
    pool.insert({blocks_[b].size, blocks_[b].addr, b});
  }

  uint64_t addr(int32_t b) const { return blocks_[b].addr; }
  uint64_t reserved() const { return reserved_; }

 private:
  // round_size(): at least kMinBlockSize (the unit), a multiple of it.
  uint64_t round_size(uint64_t size) const { return std::max(unit_, align_up(size, unit_)); }

  // get_allocation_size(): the size of the segment created for a rounded request.
  static uint64_t allocation_size(uint64_t size) {
    if (size <= kSmallSize) return kSmallBuffer;
    if (size < kMinLargeAlloc) return kLargeBuffer;
    return align_up(size, kRoundLarge);
  }

  FreePool& pool_of(bool small) { return small ? small_pool_ : large_pool_; }

  uint64_t unit_;
  uint64_t reserved_ = 0;
  std::vector<Block> blocks_;
  FreePool small_pool_;
  FreePool large_pool_;
};

}  // namespace

Layout layout_pytorch(const Graph& g, const Liveness& live, uint64_t alignment) {
  layout_internal::check_layout_inputs(g, live, alignment, "pytorch");
  const size_t n = g.storages.size();
  // Segment sizes are rounded to the unit too: a no-op for alignments up to 2 MiB; above that it
  // keeps the next segment's base aligned.
  CachingAllocator alloc(std::lcm(kMinBlockSize, alignment));

  int32_t steps = 0;
  for (size_t s = 0; s < n; ++s) steps = std::max(steps, live.last[s] + 1);
  // Storages by the step that allocates / frees them, in increasing StorageIdx.
  std::vector<std::vector<StorageIdx>> alloc_at(steps), free_at(steps);
  for (size_t s = 0; s < n; ++s) {
    alloc_at[live.first[s]].push_back(static_cast<StorageIdx>(s));
    free_at[live.last[s]].push_back(static_cast<StorageIdx>(s));
  }

  Layout out;
  out.offsets.assign(n, 0);
  std::vector<int32_t> block_of(n, -1);
  for (int32_t t = 0; t < steps; ++t) {
    for (StorageIdx s : alloc_at[t]) {
      block_of[s] = alloc.allocate(g.storages[s].size);
      out.offsets[s] = alloc.addr(block_of[s]);
    }
    for (StorageIdx s : free_at[t]) alloc.free(block_of[s]);
  }
  // Nothing is ever released, so the final reserved total is the peak reserved.
  out.reserved_bytes = alloc.reserved();
  return out;
}

}  // namespace roam
