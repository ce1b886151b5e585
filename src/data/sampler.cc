#include "data/sampler.h"

#include <numeric>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/log.h"
#include "core/philox.h"

namespace colonnade::data {

std::string Cursor::ToString() const { return absl::StrCat(epoch, ":", position); }

absl::StatusOr<Cursor> Cursor::Parse(const std::string& s) {
  std::vector<std::string> parts = absl::StrSplit(s, ':');
  Cursor c;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &c.epoch) ||
      !absl::SimpleAtoi(parts[1], &c.position) || c.epoch < 0 || c.position < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data cursor '", s, "' is not EPOCH:POSITION with non-negative integers"));
  }
  return c;
}

std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  const uint64_t key = MixKey(seed, static_cast<uint64_t>(RandomPurpose::kDataOrder));
  for (int64_t i = n - 1; i > 0; --i) {
    // j uniform in [0, i] from 64 random bits (bias <= n / 2^64, negligible).
    Philox4 r = Philox4x32(key, static_cast<uint64_t>(epoch), static_cast<uint64_t>(i));
    uint64_t bits = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
    uint64_t j = static_cast<uint64_t>(
        (static_cast<unsigned __int128>(bits) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(p[i], p[j]);
  }
  return p;
}

void RankSlice(int64_t count, int rank, int size, int64_t* begin, int64_t* end) {
  *begin = count * rank / size;
  *end = count * (rank + 1) / size;
}

Sampler::Sampler(int64_t dataset_size, int64_t global_batch, uint64_t seed, bool shuffle,
                 bool drop_last)
    : size_(dataset_size),
      batch_(global_batch),
      seed_(seed),
      shuffle_(shuffle),
      drop_last_(drop_last) {
  CHECK_GT(global_batch, 0);
  CHECK_GE(dataset_size, 0);
}

int64_t Sampler::batches_per_epoch() const {
  return drop_last_ ? size_ / batch_ : (size_ + batch_ - 1) / batch_;
}

Cursor Sampler::Normalize(Cursor c) const {
  const bool past_end = drop_last_ ? c.position + batch_ > size_ : c.position >= size_;
  if (past_end) return Cursor{c.epoch + 1, 0};
  return c;
}

int64_t Sampler::BatchCount(const Cursor& c) const { return std::min(batch_, size_ - c.position); }

Cursor Sampler::Advance(const Cursor& c) const {
  return Normalize(Cursor{c.epoch, c.position + BatchCount(c)});
}

std::shared_ptr<const std::vector<int64_t>> Sampler::Order(int64_t epoch) {
  if (!shuffle_) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& e : cache_) {
    if (e.first == epoch) return e.second;
  }
  auto order = std::make_shared<const std::vector<int64_t>>(EpochPermutation(size_, seed_, epoch));
  if (cache_.size() >= 2) cache_.erase(cache_.begin());
  cache_.emplace_back(epoch, order);
  return order;
}

int64_t Sampler::IndexAt(int64_t epoch, int64_t position) {
  std::shared_ptr<const std::vector<int64_t>> o = Order(epoch);
  return o ? (*o)[position] : position;
}

}  // namespace colonnade::data
