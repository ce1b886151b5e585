// The one finite-difference gradient checker every layer test uses (in the spirit of
// Caffe's GradientChecker).
//
// A layer (or a whole Net) is reduced to a scalar by a random projection of its outputs,
//   L = sum_o sum_i r_o[i] * y_o[i],
// so that Backward with dy_o = r_o must produce dL/dx and dL/dparam. Each checked
// element v is then perturbed in float and the central difference
//   (L(v + h) - L(v - h)) / ((v + h) - (v - h))        (the actual float step)
// is compared with the analytic gradient a:
//   |a - numeric| <= abs_tol + rel_tol * max(|a|, |numeric|).
//
// Tolerances (float32). L is accumulated in double, so its error comes only from the
// float outputs: each affected output carries a relative error of a few ulps (~1e-7 of
// |y|), which the division by 2h = 2e-2 amplifies to ~1e-5..1e-4 of |y| for the sizes
// used in the tests; the truncation error of the central difference is h^2/6 |f'''|,
// ~2e-5 for the smooth layers here. abs_tol = 1e-3 and rel_tol = 1e-2 leave a margin of
// about 10x over both, while an error of a few per cent in one element (a wrong factor,
// a missing window term, a gradient sent to the wrong pixel) still fails. That margin is
// measured, not assumed: every check first measures L's rounding noise and fails if
// noise / (2 step) exceeds a quarter of abs_tol, because the noise depends on the summation
// order of the BLAS kernel (a test with a 5x smaller step passed on one OpenBLAS kernel
// and failed on two others). Tests keep
// inputs away from kinks (ReLU at 0, ties in max pooling) by construction, and use
// LRN constants that make the non-linear terms large enough to be seen. The checker's
// own ability to fail is tested in gradient_check_test.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/layer.h"
#include "core/net.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace colonnade {
namespace testing {

// ---- random data ---------------------------------------------------------------------
// Uniform values in [lo, hi).
std::vector<float> RandomUniform(int64_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f);
// Uniform values with |v| in [min_abs, max_abs] and a random sign: keeps inputs away
// from a kink at 0 (ReLU).
std::vector<float> RandomAwayFromZero(int64_t n, std::mt19937& rng, float min_abs, float max_abs);
// A random permutation of {(k - n/2) * spacing}: all values distinct and at least
// `spacing` apart, so a max over any window has a unique winner that a perturbation
// smaller than spacing/2 cannot change.
std::vector<float> RandomDistinct(int64_t n, std::mt19937& rng, float spacing);
Tensor TensorFrom(const Shape& shape, const std::vector<float>& values);
Tensor RandomTensor(const Shape& shape, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f);
// A tensor filled with NaN: an output element that an op forgets to write stays NaN.
Tensor PoisonedTensor(const Shape& shape);

// ‖out - ref‖ / ‖ref‖ (returns ‖out‖ when ref is zero, and infinity if out has a NaN).
double RelativeError(const std::vector<float>& out, const std::vector<double>& ref);

// ---- gradient check ------------------------------------------------------------------
struct GradientCheckOptions {
  float step = 1e-2f;
  float rel_tol = 1e-2f;
  float abs_tol = 1e-3f;
  // Tensors of at most this many elements are checked element by element; larger ones
  // at `samples` distinct random elements.
  int64_t check_all_up_to = 400;
  int64_t samples = 256;
  uint32_t seed = 1234;
  // Rounding-noise guard: L is re-evaluated at `noise_samples` random elements of every
  // target, each moved by a few ulps, and the largest departure from the linear
  // prediction is L's float rounding noise. noise / (2 step) must stay under
  // max_noise_fraction * abs_tol (see CompareWithFiniteDifferences).
  int noise_samples = 2;
  double max_noise_fraction = 0.25;
  RunContext ctx;
  // Inputs whose gradient is not checked (labels); they get no dx buffer.
  std::vector<int> skip_inputs;
  // Input values; default RandomUniform(-1, 1).
  std::function<std::vector<float>(int input, int64_t size, std::mt19937& rng)> input_values;
  // Parameter values; default RandomUniform(-1, 1). Non-learnable parameters are filled
  // too but never checked.
  std::function<std::vector<float>(const Param& p, std::mt19937& rng)> param_values;
  // Projection weights r of output o; default RandomUniform(-1, 1). A loss layer uses
  // fixed weights (its Backward ignores dy).
  std::function<std::vector<float>(int output, int64_t size, std::mt19937& rng)> output_weights;
};

// Something whose gradient is checked: `size` floats at `value` (perturbed in place)
// and the analytic gradient of L with respect to them.
struct GradTarget {
  std::string name;
  float* value;
  int64_t size;
  std::vector<float> analytic;
};

// The largest rounding error of `loss` seen when `elements_per_target` random elements
// of each target are moved by a few ulps (the linear change a * du is subtracted).
double MeasureLossRoundingNoise(const std::function<double()>& loss,
                                std::vector<GradTarget>& targets, int elements_per_target,
                                uint32_t seed);

// Compares every target's analytic gradient with central differences of `loss`, which
// must recompute L from the current values. Returns failure with the worst elements, or
// when L's measured rounding noise would make the comparison machine-dependent.
::testing::AssertionResult CompareWithFiniteDifferences(const std::function<double()>& loss,
                                                        std::vector<GradTarget>& targets,
                                                        const GradientCheckOptions& o);

// Sets the layer up for `input_shapes` on the CPU, fills parameters and inputs with
// random values, and checks the gradients of every input (except skip_inputs) and every
// learnable parameter. `layer` may be set up again by the caller afterwards.
::testing::AssertionResult CheckLayerGradients(Layer& layer, const std::vector<Shape>& input_shapes,
                                               const GradientCheckOptions& o = {});

// For a built Net whose inputs are already filled: L = ctx.loss_scale * sum of the blob
// `loss_blob`; checks every learnable parameter's gradient after Net::Backward.
::testing::AssertionResult CheckNetGradients(Net& net, const std::string& loss_blob,
                                             const GradientCheckOptions& o = {});

}  // namespace testing
}  // namespace colonnade
