#include "gradient_check.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <sstream>

#include "core/backend.h"
#include "core/ops.h"

namespace colonnade {
namespace testing {

std::vector<float> RandomUniform(int64_t n, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

std::vector<float> RandomAwayFromZero(int64_t n, std::mt19937& rng, float min_abs, float max_abs) {
  std::uniform_real_distribution<float> u(min_abs, max_abs);
  std::bernoulli_distribution sign(0.5);
  std::vector<float> v(n);
  for (float& x : v) x = sign(rng) ? u(rng) : -u(rng);
  return v;
}

std::vector<float> RandomDistinct(int64_t n, std::mt19937& rng, float spacing) {
  std::vector<float> v(n);
  for (int64_t k = 0; k < n; ++k) v[k] = static_cast<float>(k - n / 2) * spacing;
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

Tensor TensorFrom(const Shape& shape, const std::vector<float>& values) {
  Tensor t(shape, Device::kCPU);
  t.CopyFromHost(values);
  return t;
}

Tensor RandomTensor(const Shape& shape, std::mt19937& rng, float lo, float hi) {
  return TensorFrom(shape, RandomUniform(shape.elements(), rng, lo, hi));
}

Tensor PoisonedTensor(const Shape& shape) {
  Tensor t(shape, Device::kCPU);
  std::fill(t.data(), t.data() + t.size(), std::numeric_limits<float>::quiet_NaN());
  return t;
}

double RelativeError(const std::vector<float>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return std::numeric_limits<double>::infinity();
    const double d = out[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

double MeasureLossRoundingNoise(const std::function<double()>& loss,
                                std::vector<GradTarget>& targets, int elements_per_target,
                                uint32_t seed) {
  std::mt19937 rng(seed);
  double noise = 0.0;
  for (GradTarget& t : targets) {
    if (t.size == 0 || static_cast<int64_t>(t.analytic.size()) != t.size) continue;
    std::uniform_int_distribution<int64_t> pick(0, t.size - 1);
    for (int e = 0; e < elements_per_target; ++e) {
      const int64_t i = pick(rng);
      const float orig = t.value[i];
      // About 8 ulps of the value: far below any step, so L moves by a * du plus rounding.
      const float u = std::max(std::fabs(orig), 1e-3f) * 0x1p-20f;
      const double base = loss();
      for (int k : {-2, -1, 1, 2}) {
        const float v = orig + static_cast<float>(k) * u;
        t.value[i] = v;
        const double predicted =
            base + static_cast<double>(t.analytic[i]) * (static_cast<double>(v) - orig);
        noise = std::max(noise, std::fabs(loss() - predicted));
      }
      t.value[i] = orig;
    }
  }
  return noise;
}

::testing::AssertionResult CompareWithFiniteDifferences(const std::function<double()>& loss,
                                                        std::vector<GradTarget>& targets,
                                                        const GradientCheckOptions& o) {
  // A central difference carries the loss's rounding noise divided by the step. If that
  // term is a sizeable part of abs_tol, the check passes or fails by the summation order
  // of the BLAS kernel the machine happens to pick (it did: OpenBLAS's SkylakeX and
  // Sandybridge kernels failed a check that Haswell passed). Measure the noise here and
  // refuse such a check on every machine, instead of letting it fail on some.
  // The measured figure is itself a difference of two noisy values of L, as the central
  // difference's numerator is; that numerator is divided by 2 * step.
  const double noise = MeasureLossRoundingNoise(loss, targets, o.noise_samples, o.seed);
  const double noise_in_derivative = noise / (2.0 * o.step);
  if (!(noise_in_derivative <= o.max_noise_fraction * o.abs_tol)) {
    return ::testing::AssertionFailure()
           << "the loss's float rounding noise (" << noise << ") divided by 2 * step ("
           << 2.0 * o.step << ") is " << noise_in_derivative << ", more than "
           << o.max_noise_fraction << " of abs_tol " << o.abs_tol
           << ": the result would depend on the machine's BLAS kernel; use a larger step";
  }
  std::mt19937 rng(o.seed ^ 0x9e3779b9u);
  struct Failure {
    std::string target;
    int64_t index;
    double analytic, numeric, excess;
  };
  std::vector<Failure> failures;
  int64_t checked = 0;
  for (GradTarget& t : targets) {
    if (static_cast<int64_t>(t.analytic.size()) != t.size) {
      return ::testing::AssertionFailure() << t.name << ": analytic gradient has "
                                           << t.analytic.size() << " elements, expected " << t.size;
    }
    std::vector<int64_t> idx(t.size);
    std::iota(idx.begin(), idx.end(), 0);
    if (t.size > o.check_all_up_to) {
      std::shuffle(idx.begin(), idx.end(), rng);
      idx.resize(std::min<int64_t>(o.samples, t.size));
      std::sort(idx.begin(), idx.end());
    }
    for (int64_t i : idx) {
      const float orig = t.value[i];
      const float plus = orig + o.step, minus = orig - o.step;
      t.value[i] = plus;
      const double lp = loss();
      t.value[i] = minus;
      const double lm = loss();
      t.value[i] = orig;
      const double numeric = (lp - lm) / (static_cast<double>(plus) - static_cast<double>(minus));
      const double a = t.analytic[i];
      const double tol = o.abs_tol + o.rel_tol * std::max(std::fabs(a), std::fabs(numeric));
      const double err = std::fabs(a - numeric);
      ++checked;
      if (!(err <= tol)) failures.push_back({t.name, i, a, numeric, err / tol});
    }
  }
  if (checked == 0) return ::testing::AssertionFailure() << "no gradient element was checked";
  if (failures.empty()) return ::testing::AssertionSuccess() << checked << " elements match";
  std::sort(failures.begin(), failures.end(),
            [](const Failure& a, const Failure& b) { return a.excess > b.excess; });
  ::testing::AssertionResult r = ::testing::AssertionFailure();
  r << failures.size() << " of " << checked << " gradient elements differ from central "
    << "differences (step " << o.step << ", tol " << o.abs_tol << " + " << o.rel_tol
    << " * max(|a|,|n|)); worst:";
  for (size_t k = 0; k < std::min<size_t>(failures.size(), 8); ++k) {
    const Failure& f = failures[k];
    r << "\n  " << f.target << "[" << f.index << "]: analytic " << f.analytic << ", numeric "
      << f.numeric << " (" << f.excess << "x tolerance)";
  }
  return r;
}

::testing::AssertionResult CheckLayerGradients(Layer& layer, const std::vector<Shape>& input_shapes,
                                               const GradientCheckOptions& o) {
  absl::StatusOr<std::vector<Shape>> out_shapes = layer.Setup(input_shapes);
  if (!out_shapes.ok()) {
    return ::testing::AssertionFailure() << "Setup failed: " << out_shapes.status().ToString();
  }
  layer.AllocateParams(Device::kCPU);
  Ops& ops = OpsFor(Device::kCPU);
  std::mt19937 rng(o.seed);

  for (Param* p : layer.params()) {
    std::vector<float> v =
        o.param_values ? o.param_values(*p, rng) : RandomUniform(p->value.size(), rng);
    p->value.CopyFromHost(v);
  }
  std::vector<Tensor> x;
  for (size_t i = 0; i < input_shapes.size(); ++i) {
    const int64_t n = input_shapes[i].elements();
    x.push_back(TensorFrom(
        input_shapes[i], o.input_values ? o.input_values(int(i), n, rng) : RandomUniform(n, rng)));
  }
  std::vector<Tensor> y, r;
  for (size_t k = 0; k < out_shapes->size(); ++k) {
    const Shape& s = (*out_shapes)[k];
    y.push_back(PoisonedTensor(s));
    r.push_back(TensorFrom(s, o.output_weights ? o.output_weights(int(k), s.elements(), rng)
                                               : RandomUniform(s.elements(), rng)));
  }
  std::vector<const Tensor*> xp, yc, dyp;
  std::vector<Tensor*> yp;
  for (Tensor& t : x) xp.push_back(&t);
  for (Tensor& t : y) {
    yp.push_back(&t);
    yc.push_back(&t);
  }
  for (Tensor& t : r) dyp.push_back(&t);

  auto loss = [&]() {
    layer.Forward(ops, o.ctx, xp, yp);
    double l = 0.0;
    for (size_t k = 0; k < y.size(); ++k)
      for (int64_t i = 0; i < y[k].size(); ++i)
        l += static_cast<double>(r[k].data()[i]) * y[k].data()[i];
    return l;
  };

  // Analytic gradients at the unperturbed point; buffers start as NaN so that an element
  // Backward forgets to overwrite fails the comparison.
  const double l0 = loss();
  if (!std::isfinite(l0)) return ::testing::AssertionFailure() << "forward gave L = " << l0;
  std::vector<Tensor> dx(x.size());
  std::vector<Tensor*> dxp;
  for (size_t i = 0; i < x.size(); ++i) {
    const bool skip = std::count(o.skip_inputs.begin(), o.skip_inputs.end(), int(i)) > 0;
    if (!skip) dx[i] = PoisonedTensor(x[i].shape());
    dxp.push_back(skip ? nullptr : &dx[i]);
  }
  for (Param* p : layer.params())
    if (p->learnable) p->grad.Fill(std::numeric_limits<float>::quiet_NaN());
  layer.Backward(ops, o.ctx, xp, yc, dyp, dxp);

  std::vector<GradTarget> targets;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!dxp[i]) continue;
    targets.push_back(
        {layer.name() + ":input" + std::to_string(i), x[i].data(), x[i].size(), dx[i].ToHost()});
  }
  for (Param* p : layer.params()) {
    if (!p->learnable) continue;
    targets.push_back(
        {layer.name() + "/" + p->name, p->value.data(), p->value.size(), p->grad.ToHost()});
  }
  return CompareWithFiniteDifferences(loss, targets, o);
}

::testing::AssertionResult CheckNetGradients(Net& net, const std::string& loss_blob,
                                             const GradientCheckOptions& o) {
  Ops& ops = net.ops();
  auto loss = [&]() {
    net.Forward(o.ctx);
    return static_cast<double>(o.ctx.loss_scale) * ops.Sum(net.blob(loss_blob));
  };
  const double l0 = loss();
  if (!std::isfinite(l0)) return ::testing::AssertionFailure() << "forward gave L = " << l0;
  std::vector<NamedParam> params = net.params();
  for (const NamedParam& np : params)
    if (np.param->learnable) np.param->grad.Fill(std::numeric_limits<float>::quiet_NaN());
  net.Backward(o.ctx);
  std::vector<GradTarget> targets;
  for (const NamedParam& np : params) {
    if (!np.param->learnable) continue;
    Param& p = *np.param;
    targets.push_back({np.name, p.value.data(), p.value.size(), p.grad.ToHost()});
  }
  return CompareWithFiniteDifferences(loss, targets, o);
}

}  // namespace testing
}  // namespace colonnade
