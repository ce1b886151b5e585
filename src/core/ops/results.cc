// The results family's shape rule and CPU reference (results.h; the CUDA kernel:
// src/cuda/ops/results.cu).
#include "core/ops/results.h"

#include <cmath>

#include "core/cpu_ops.h"
#include "core/log.h"

namespace colonnade {

namespace op_shapes {

SoftmaxDims Results(const Tensor& probs, const Tensor& labels, const Tensor& loss,
                    const Tensor& totals) {
  CHECK_EQ(totals.size(), kResultTotalsFloats)
      << "AccumulateResults: totals " << totals.shape().ToString() << " are not a ResultTotals";
  return Softmax(probs, labels, probs, &loss, "AccumulateResults");
}

}  // namespace op_shapes

// The step's loss sum by Sum (the order the trainer's host-side sums always had, so CPU
// runs log the same bits), its correct counts by CountCorrect.
void CpuOps::AccumulateResults(const Tensor& probs, const Tensor& labels,
                               const Tensor& loss_per_image, int64_t step,
                               const int64_t* /*step_on_device*/, Tensor& totals) {
  const op_shapes::SoftmaxDims d = op_shapes::Results(probs, labels, loss_per_image, totals);
  ResultTotals* t = reinterpret_cast<ResultTotals*>(totals.data());
  const double loss = Sum(loss_per_image);
  t->loss_sum += loss;
  CountCorrect(probs.data(), labels.data(), d.classes, d.batch, &t->top1, &t->top5);
  t->last_loss_sum = loss;
  t->steps += 1;
  if (!std::isfinite(loss)) {
    if (t->nonfinite_steps == 0) {
      t->first_nonfinite_step = step;
      t->first_nonfinite_loss = loss;
    }
    t->nonfinite_steps += 1;
  }
}

}  // namespace colonnade
