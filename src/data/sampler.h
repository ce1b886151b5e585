// The global sampler: which dataset images form global batch b of epoch e, and which
// slice of it each data-parallel rank takes.
//
// The order of epoch e is a permutation that is a pure function of (seed, e) (Philox,
// RandomPurpose::kDataOrder), identical on every rank. Global batch b covers positions
// [b*B, min((b+1)*B, size)) of that order; dp rank r takes the r-th of dp equal parts of
// it. Ranks of one model-parallel group pass the same dp rank and so receive identical
// images. The cursor (epoch, position) is exact: position is the index, within the epoch
// order, of the next global batch's first image.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace colonnade::data {

struct Cursor {
  int64_t epoch = 0;
  int64_t position = 0;  // index of the next global batch's first sample within the epoch
  bool operator==(const Cursor& o) const { return epoch == o.epoch && position == o.position; }
  bool operator!=(const Cursor& o) const { return !(*this == o); }
  std::string ToString() const;                               // "3:1280"
  static absl::StatusOr<Cursor> Parse(const std::string& s);  // inverse of ToString
};

// The permutation of [0, n) for (seed, epoch): Fisher-Yates driven by Philox draws keyed
// by (seed, kDataOrder) with counter (epoch, step); no stateful generator.
std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, int64_t epoch);

// The positions [begin, end) within a global batch of `count` images that dp rank `rank`
// of `size` takes: [rank*count/size, (rank+1)*count/size). For a full batch with
// count % size == 0 every rank gets count/size images; a final partial batch (eval) is
// split as evenly as the formula gives, and a rank may get 0 images.
void RankSlice(int64_t count, int rank, int size, int64_t* begin, int64_t* end);

class Sampler {
 public:
  // shuffle=false: the identity order every epoch. drop_last: the last global batch of an
  // epoch is dropped when it has fewer than global_batch images; otherwise it is kept.
  Sampler(int64_t dataset_size, int64_t global_batch, uint64_t seed, bool shuffle, bool drop_last);

  int64_t dataset_size() const { return size_; }
  int64_t global_batch() const { return batch_; }
  int64_t batches_per_epoch() const;
  // A cursor at or past the end of its epoch's last (kept) batch moves to (epoch+1, 0).
  Cursor Normalize(Cursor c) const;
  // Images in the global batch that starts at normalized cursor `c`.
  int64_t BatchCount(const Cursor& c) const;
  // The cursor after the global batch at `c` (normalized).
  Cursor Advance(const Cursor& c) const;
  // The order of `epoch` (shared; the two most recent epochs are cached). nullptr means
  // the identity (shuffle off).
  std::shared_ptr<const std::vector<int64_t>> Order(int64_t epoch);
  // Dataset index of position `position` of `epoch`.
  int64_t IndexAt(int64_t epoch, int64_t position);

 private:
  int64_t size_, batch_;
  uint64_t seed_;
  bool shuffle_, drop_last_;
  std::mutex mu_;
  std::vector<std::pair<int64_t, std::shared_ptr<const std::vector<int64_t>>>> cache_;
};

}  // namespace colonnade::data
