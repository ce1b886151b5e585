// Small helpers shared by the layer tests: set a layer up on the CPU, write parameters,
// run Forward into NaN-poisoned outputs (so an unwritten element fails the comparison).
#pragma once

#include <vector>

#include "core/backend.h"
#include "core/layer.h"
#include "core/tensor.h"
#include "gradient_check.h"
#include "gtest/gtest.h"
#include "naive_reference.h"

namespace colonnade {
namespace testing {

inline Dims DimsOf(const Shape& s) { return Dims{s.c(), s.h(), s.w(), s.n()}; }

// The CPU backend's ops.
inline Ops& Cpu() { return OpsFor(Device::kCPU); }

// Setup + AllocateParams on the CPU; fails the test if Setup fails.
inline std::vector<Shape> SetUpLayer(Layer& layer, const std::vector<Shape>& inputs) {
  absl::StatusOr<std::vector<Shape>> out = layer.Setup(inputs);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  if (!out.ok()) return {};
  layer.AllocateParams(Device::kCPU);
  return *out;
}

inline void SetValues(Tensor& t, const std::vector<float>& v) { t.CopyFromHost(v); }

// Runs Forward on `inputs` and returns the outputs (allocated poisoned).
inline std::vector<Tensor> RunForward(Layer& layer, const std::vector<const Tensor*>& inputs,
                                      const std::vector<Shape>& out_shapes,
                                      const RunContext& ctx = {}) {
  std::vector<Tensor> y;
  for (const Shape& s : out_shapes) y.push_back(PoisonedTensor(s));
  std::vector<Tensor*> yp;
  for (Tensor& t : y) yp.push_back(&t);
  layer.Forward(OpsFor(Device::kCPU), ctx, inputs, yp);
  return y;
}

// Relative error of a float-32 op against a double reference (DESIGN.md: < 1e-5).
constexpr double kForwardTolerance = 1e-5;

}  // namespace testing
}  // namespace colonnade
