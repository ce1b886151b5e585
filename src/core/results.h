// The results of training or evaluation steps (loss, top-1 and top-5 correct counts) as
// running totals kept on the device that runs the steps: Ops::AccumulateResults adds one
// step to them there, so a trainer copies a few bytes back when it reports (--log_every,
// a checkpoint, an evaluation) instead of every step's probabilities. Inside a step
// captured as a CUDA graph the addition is one more node of the graph.
//
//   Tensor totals = NewResultTotals(device);          // zero
//   ops.AccumulateResults(probs, labels, loss, step, nullptr, totals);   // every step
//   ResultTotals t = ReadResultTotals(totals);          // when reporting (synchronises)
//   ops.Fill(totals, 0.0f);                             // a new interval
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/tensor.h"

namespace colonnade {

// All-zero bytes are the empty totals (Ops::Fill(totals, 0) resets them).
struct ResultTotals {
  double loss_sum = 0;       // every image's cross-entropy, summed in double
  double top1 = 0;           // images whose label has the highest probability
  double top5 = 0;           // images whose label is among the five highest
  double last_loss_sum = 0;  // the loss sum of the last step added
  int64_t steps = 0;         // steps added
  // Steps whose loss sum was not finite (NaN or infinite), and the first of them: its
  // step number and loss sum (valid when nonfinite_steps > 0).
  int64_t nonfinite_steps = 0;
  int64_t first_nonfinite_step = 0;
  double first_nonfinite_loss = 0;
  // The GPU kernel's count of blocks done with the running launch (its last block adds
  // the step to the totals and sets it back to 0); always 0 between launches.
  uint32_t blocks_done = 0;
  uint32_t unused = 0;
};
// The totals live in a float Tensor of this many elements (its bytes are the struct).
inline constexpr int64_t kResultTotalsFloats = sizeof(ResultTotals) / sizeof(float);
static_assert(sizeof(ResultTotals) % sizeof(float) == 0);

// Zeroed totals on `device`.
Tensor NewResultTotals(Device device);
// The totals held by `t` (any device; waits for the device's queued work).
ResultTotals ReadResultTotals(const Tensor& t);

// The top-1 and top-5 correct counts of probabilities K x N (class-major, images
// innermost) for `labels` (N class indices stored as floats), added to *top1 and *top5.
// A class ranks above the label's when its probability is larger, or equal with a lower
// class index, so ties never count in the model's favour. A label outside [0, K) counts
// as wrong. The GPU's AccumulateResults kernel computes the same counts.
template <typename T>
void CountCorrect(const T* probs, const float* labels, int64_t k, int64_t n, double* top1,
                  double* top5) {
  for (int64_t j = 0; j < n; ++j) {
    const int64_t label = static_cast<int64_t>(labels[j]);
    if (label < 0 || label >= k) continue;
    const T p = probs[label * n + j];
    int64_t better = 0;  // classes ranked above the true one
    for (int64_t c = 0; c < k; ++c) {
      const T q = probs[c * n + j];
      if (q > p || (q == p && c < label)) ++better;
    }
    if (better == 0) *top1 += 1;
    if (better < 5) *top5 += 1;
  }
}

}  // namespace colonnade
