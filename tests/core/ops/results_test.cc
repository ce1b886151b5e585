// Ops::AccumulateResults on the CPU (core/results.h) against references written here: the
// top-1/top-5 counts of a full sort of each image's classes (probability descending, class
// index ascending on ties, so a tie never counts in the model's favour), the loss sum in
// double, and the bookkeeping of steps and of the first non-finite one. The GPU kernel is
// checked against this CPU op in tests/cuda/ops/results_test.cc.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/cpu_ops.h"
#include "core/results.h"
#include "gtest/gtest.h"

namespace colonnade {
namespace {

struct Step {
  Tensor probs, labels, loss;
};

// Random probabilities drawn from `levels` values (few levels: many ties), labels in
// [0, k) except image 0's when `bad_label` (k: outside), losses in [0, 5).
Step RandomStep(int64_t k, int64_t n, int levels, bool bad_label, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> level(0, levels - 1);
  std::uniform_int_distribution<int64_t> cls(0, k - 1);
  std::uniform_real_distribution<float> u(0.0f, 5.0f);
  Step s{Tensor(Shape{k, 1, 1, n}), Tensor(Shape{1, 1, 1, n}), Tensor(Shape{n})};
  for (int64_t i = 0; i < s.probs.size(); ++i) {
    s.probs.data()[i] = static_cast<float>(level(rng)) / levels;
  }
  for (int64_t j = 0; j < n; ++j) {
    s.labels.data()[j] = static_cast<float>(cls(rng));
    s.loss.data()[j] = u(rng);
  }
  if (bad_label) s.labels.data()[0] = static_cast<float>(k);
  return s;
}

// The label's place among the classes sorted by (probability descending, index
// ascending); -1 for a label outside [0, k).
int64_t PlaceOfLabel(const Step& s, int64_t j) {
  const int64_t k = s.probs.shape()[0], n = s.loss.size();
  const int64_t label = static_cast<int64_t>(s.labels.data()[j]);
  if (label < 0 || label >= k) return -1;
  std::vector<int64_t> order(k);
  std::iota(order.begin(), order.end(), 0);
  const float* p = s.probs.data();
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const float pa = p[a * n + j], pb = p[b * n + j];
    return pa != pb ? pa > pb : a < b;
  });
  return std::find(order.begin(), order.end(), label) - order.begin();
}

TEST(AccumulateResults, CountsAsAFullSortAndSumsTheLoss) {
  CpuOps ops;
  struct Case {
    int64_t k, n;
    int levels;
    bool bad_label;
  };
  for (const Case& c : {Case{1, 7, 3, false}, Case{3, 33, 2, false}, Case{10, 33, 4, true},
                        Case{10, 128, 1000, false}, Case{50, 7, 5, false}}) {
    SCOPED_TRACE(::testing::Message() << c.k << " classes, " << c.n << " images");
    const Step s = RandomStep(c.k, c.n, c.levels, c.bad_label, c.k * 1000 + c.n);
    double top1 = 0, top5 = 0, loss = 0;
    int ties_decide = 0;  // images whose top-1/top-5 verdict a tie decided
    for (int64_t j = 0; j < c.n; ++j) {
      const int64_t place = PlaceOfLabel(s, j);
      top1 += place == 0 ? 1 : 0;
      top5 += place >= 0 && place < 5 ? 1 : 0;
      loss += s.loss.data()[j];
      if (place < 0) continue;
      int64_t strictly_above = 0;  // the place if ties went the label's way
      const int64_t label = static_cast<int64_t>(s.labels.data()[j]);
      for (int64_t q = 0; q < c.k; ++q) {
        strictly_above += s.probs.data()[q * c.n + j] > s.probs.data()[label * c.n + j] ? 1 : 0;
      }
      if ((strictly_above == 0) != (place == 0) || (strictly_above < 5) != (place < 5)) {
        ++ties_decide;
      }
    }
    if (c.levels <= 4 && c.k > 1) EXPECT_GT(ties_decide, 0) << "the case needs deciding ties";
    Tensor totals = NewResultTotals(Device::kCPU);
    ops.AccumulateResults(s.probs, s.labels, s.loss, 3, nullptr, totals);
    const ResultTotals t = ReadResultTotals(totals);
    EXPECT_EQ(t.top1, top1);
    EXPECT_EQ(t.top5, top5);
    EXPECT_EQ(t.loss_sum, loss);  // the same additions in the same order
    EXPECT_EQ(t.last_loss_sum, loss);
    EXPECT_EQ(t.steps, 1);
    EXPECT_EQ(t.nonfinite_steps, 0);
  }
}

TEST(AccumulateResults, AddsStepsAndKeepsTheFirstNonFiniteOne) {
  CpuOps ops;
  Tensor totals = NewResultTotals(Device::kCPU);
  Step a = RandomStep(10, 16, 10, false, 1);
  Step b = RandomStep(10, 16, 10, false, 2);
  double sum_a = 0, sum_b = 0;
  for (int64_t j = 0; j < 16; ++j) sum_a += a.loss.data()[j];
  ops.AccumulateResults(a.probs, a.labels, a.loss, 5, nullptr, totals);
  b.loss.data()[3] = std::numeric_limits<float>::quiet_NaN();
  ops.AccumulateResults(b.probs, b.labels, b.loss, 6, nullptr, totals);
  b.loss.data()[3] = std::numeric_limits<float>::infinity();
  ops.AccumulateResults(b.probs, b.labels, b.loss, 7, nullptr, totals);
  for (int64_t j = 0; j < 16; ++j) sum_b += b.loss.data()[j];
  ResultTotals t = ReadResultTotals(totals);
  EXPECT_EQ(t.steps, 3);
  EXPECT_EQ(t.nonfinite_steps, 2);
  EXPECT_EQ(t.first_nonfinite_step, 6);
  EXPECT_TRUE(std::isnan(t.first_nonfinite_loss));
  EXPECT_EQ(t.last_loss_sum, sum_b);  // +inf
  EXPECT_TRUE(std::isnan(t.loss_sum));
  // Zero bytes are the empty totals; the next step starts a new count.
  totals.Fill(0.0f);
  ops.AccumulateResults(a.probs, a.labels, a.loss, 8, nullptr, totals);
  t = ReadResultTotals(totals);
  EXPECT_EQ(t.steps, 1);
  EXPECT_EQ(t.nonfinite_steps, 0);
  EXPECT_EQ(t.loss_sum, sum_a);
}

}  // namespace
}  // namespace colonnade
