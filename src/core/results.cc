#include "core/results.h"

namespace colonnade {

Tensor NewResultTotals(Device device) {
  Tensor t(Shape{kResultTotalsFloats}, device);
  t.Fill(0.0f);
  return t;
}

ResultTotals ReadResultTotals(const Tensor& t) {
  const std::vector<float> bytes = t.ToHost();
  ResultTotals r;
  std::memcpy(static_cast<void*>(&r), bytes.data(), sizeof(r));
  return r;
}

}  // namespace colonnade
