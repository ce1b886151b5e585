#include "naive_reference.h"

#include <algorithm>
#include <cmath>

namespace colonnade {
namespace testing {

std::vector<double> ToDouble(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

std::vector<double> RefConv(const std::vector<float>& x, const Dims& xd,
                            const std::vector<float>& w, int64_t filters, int kh, int kw,
                            int stride, int pad, int groups, const std::vector<float>* bias,
                            Dims* yd) {
  const int64_t cg = xd.c / groups, fg = filters / groups;
  Dims o{filters, (xd.h + 2 * pad - kh) / stride + 1, (xd.w + 2 * pad - kw) / stride + 1, xd.n};
  *yd = o;
  std::vector<double> y(o.size());
  for (int64_t f = 0; f < o.c; ++f) {
    const int64_t g = f / fg;
    for (int64_t oy = 0; oy < o.h; ++oy)
      for (int64_t ox = 0; ox < o.w; ++ox)
        for (int64_t n = 0; n < o.n; ++n) {
          double s = bias ? (*bias)[f] : 0.0;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int ky = 0; ky < kh; ++ky)
              for (int kx = 0; kx < kw; ++kx) {
                const int64_t iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
                if (iy < 0 || iy >= xd.h || ix < 0 || ix >= xd.w) continue;
                const double wv = w[((f * cg + ci) * kh + ky) * kw + kx];
                s += wv * x[xd.at(g * cg + ci, iy, ix, n)];
              }
          y[o.at(f, oy, ox, n)] = s;
        }
  }
  return y;
}

std::vector<double> RefFullyConnected(const std::vector<float>& x, int64_t inputs, int64_t n,
                                      const std::vector<float>& w, int64_t outputs,
                                      const std::vector<float>& bias) {
  std::vector<double> y(outputs * n);
  for (int64_t f = 0; f < outputs; ++f)
    for (int64_t j = 0; j < n; ++j) {
      double s = bias[f];
      for (int64_t i = 0; i < inputs; ++i)
        s += static_cast<double>(w[f * inputs + i]) * x[i * n + j];
      y[f * n + j] = s;
    }
  return y;
}

int64_t RefPoolOutSize(int64_t in, int size, int stride, int pad) {
  int64_t k = 0;
  while (-pad + k * stride + size < in + pad) ++k;  // window k does not reach the end yet
  int64_t out = k + 1;
  if (-pad + (out - 1) * stride >= in) --out;  // last window lies in the padding only
  return out;
}

std::vector<double> RefPool(const std::vector<float>& x, const Dims& xd, bool max, int size,
                            int stride, int pad, Dims* yd) {
  Dims o{xd.c, RefPoolOutSize(xd.h, size, stride, pad), RefPoolOutSize(xd.w, size, stride, pad),
         xd.n};
  *yd = o;
  std::vector<double> y(o.size());
  for (int64_t c = 0; c < o.c; ++c)
    for (int64_t oy = 0; oy < o.h; ++oy)
      for (int64_t ox = 0; ox < o.w; ++ox)
        for (int64_t n = 0; n < o.n; ++n) {
          double best = -INFINITY, sum = 0.0;
          int count = 0;
          for (int ky = 0; ky < size; ++ky)
            for (int kx = 0; kx < size; ++kx) {
              const int64_t iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
              if (iy < 0 || iy >= xd.h || ix < 0 || ix >= xd.w) continue;
              const double v = x[xd.at(c, iy, ix, n)];
              best = std::max(best, v);
              sum += v;
              ++count;
            }
          y[o.at(c, oy, ox, n)] = max ? best : sum / count;
        }
  return y;
}

std::vector<double> RefMaxPoolBackward(const std::vector<float>& x, const Dims& xd,
                                       const std::vector<float>& dy, int size, int stride,
                                       int pad) {
  Dims o{xd.c, RefPoolOutSize(xd.h, size, stride, pad), RefPoolOutSize(xd.w, size, stride, pad),
         xd.n};
  std::vector<double> dx(xd.size(), 0.0);
  for (int64_t c = 0; c < o.c; ++c)
    for (int64_t oy = 0; oy < o.h; ++oy)
      for (int64_t ox = 0; ox < o.w; ++ox)
        for (int64_t n = 0; n < o.n; ++n) {
          int64_t arg = -1;
          double best = -INFINITY;
          for (int ky = 0; ky < size; ++ky)
            for (int kx = 0; kx < size; ++kx) {
              const int64_t iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
              if (iy < 0 || iy >= xd.h || ix < 0 || ix >= xd.w) continue;
              const double v = x[xd.at(c, iy, ix, n)];
              if (arg < 0 || v > best) {  // strictly greater: the first maximum stays
                best = v;
                arg = xd.at(c, iy, ix, n);
              }
            }
          dx[arg] += dy[o.at(c, oy, ox, n)];
        }
  return dx;
}

std::vector<double> RefGlobalAvgPool(const std::vector<float>& x, const Dims& xd) {
  std::vector<double> y(xd.c * xd.n, 0.0);
  for (int64_t c = 0; c < xd.c; ++c)
    for (int64_t n = 0; n < xd.n; ++n) {
      double s = 0.0;
      for (int64_t h = 0; h < xd.h; ++h)
        for (int64_t w = 0; w < xd.w; ++w) s += x[xd.at(c, h, w, n)];
      y[c * xd.n + n] = s / static_cast<double>(xd.h * xd.w);
    }
  return y;
}

std::vector<double> RefLrnCross(const std::vector<float>& x, const Dims& xd, int size, double alpha,
                                double beta, double k, bool alpha_over_size, int groups,
                                std::vector<double>* denom) {
  const double a = alpha_over_size ? alpha / size : alpha;
  const int64_t cg = xd.c / groups;
  std::vector<double> y(xd.size());
  denom->assign(xd.size(), 0.0);
  for (int64_t c = 0; c < xd.c; ++c) {
    const int64_t group = c / cg;
    for (int64_t h = 0; h < xd.h; ++h)
      for (int64_t w = 0; w < xd.w; ++w)
        for (int64_t n = 0; n < xd.n; ++n) {
          double s = 0.0;
          for (int64_t j = c - size / 2; j <= c + size / 2; ++j) {
            if (j < group * cg || j >= (group + 1) * cg) continue;  // other group or outside
            const double v = x[xd.at(j, h, w, n)];
            s += v * v;
          }
          const double d = k + a * s;
          (*denom)[xd.at(c, h, w, n)] = d;
          y[xd.at(c, h, w, n)] = x[xd.at(c, h, w, n)] / std::pow(d, beta);
        }
  }
  return y;
}

std::vector<double> RefLrnWithin(const std::vector<float>& x, const Dims& xd, int size,
                                 double alpha, double beta, double k, std::vector<double>* denom) {
  std::vector<double> y(xd.size());
  denom->assign(xd.size(), 0.0);
  for (int64_t c = 0; c < xd.c; ++c)
    for (int64_t h = 0; h < xd.h; ++h)
      for (int64_t w = 0; w < xd.w; ++w)
        for (int64_t n = 0; n < xd.n; ++n) {
          double s = 0.0;
          for (int64_t yy = h - size / 2; yy < h - size / 2 + size; ++yy)
            for (int64_t xx = w - size / 2; xx < w - size / 2 + size; ++xx) {
              if (yy < 0 || yy >= xd.h || xx < 0 || xx >= xd.w) continue;
              const double v = x[xd.at(c, yy, xx, n)];
              s += v * v;
            }
          const double d = k + alpha / (size * size) * s;
          (*denom)[xd.at(c, h, w, n)] = d;
          y[xd.at(c, h, w, n)] = x[xd.at(c, h, w, n)] * std::pow(d, -beta);
        }
  return y;
}

std::vector<double> RefBatchNormTrain(const std::vector<float>& x, const Dims& xd,
                                      const std::vector<float>& gamma,
                                      const std::vector<float>& beta, double eps,
                                      std::vector<double>* mean, std::vector<double>* var,
                                      std::vector<double>* unbiased_var) {
  const int64_t m = xd.h * xd.w * xd.n;
  std::vector<double> y(xd.size());
  mean->assign(xd.c, 0.0);
  var->assign(xd.c, 0.0);
  unbiased_var->assign(xd.c, 0.0);
  for (int64_t c = 0; c < xd.c; ++c) {
    double s = 0.0;
    for (int64_t h = 0; h < xd.h; ++h)
      for (int64_t w = 0; w < xd.w; ++w)
        for (int64_t n = 0; n < xd.n; ++n) s += x[xd.at(c, h, w, n)];
    const double mu = s / m;
    double ss = 0.0;
    for (int64_t h = 0; h < xd.h; ++h)
      for (int64_t w = 0; w < xd.w; ++w)
        for (int64_t n = 0; n < xd.n; ++n)
          ss += (x[xd.at(c, h, w, n)] - mu) * (x[xd.at(c, h, w, n)] - mu);
    (*mean)[c] = mu;
    (*var)[c] = ss / m;
    (*unbiased_var)[c] = ss / (m - 1);
    for (int64_t h = 0; h < xd.h; ++h)
      for (int64_t w = 0; w < xd.w; ++w)
        for (int64_t n = 0; n < xd.n; ++n)
          y[xd.at(c, h, w, n)] =
              gamma[c] * (x[xd.at(c, h, w, n)] - mu) / std::sqrt(ss / m + eps) + beta[c];
  }
  return y;
}

std::vector<double> RefBatchNormInfer(const std::vector<float>& x, const Dims& xd,
                                      const std::vector<float>& gamma,
                                      const std::vector<float>& beta,
                                      const std::vector<float>& mean, const std::vector<float>& var,
                                      double eps) {
  std::vector<double> y(xd.size());
  for (int64_t c = 0; c < xd.c; ++c)
    for (int64_t h = 0; h < xd.h; ++h)
      for (int64_t w = 0; w < xd.w; ++w)
        for (int64_t n = 0; n < xd.n; ++n)
          y[xd.at(c, h, w, n)] = gamma[c] * (x[xd.at(c, h, w, n)] - static_cast<double>(mean[c])) /
                                     std::sqrt(static_cast<double>(var[c]) + eps) +
                                 beta[c];
  return y;
}

void RefSoftmaxCrossEntropy(const std::vector<float>& logits, int64_t k, int64_t n,
                            const std::vector<float>& labels, std::vector<double>* probs,
                            std::vector<double>* loss) {
  probs->assign(k * n, 0.0);
  loss->assign(n, 0.0);
  for (int64_t j = 0; j < n; ++j) {
    double mx = -INFINITY;
    for (int64_t c = 0; c < k; ++c) mx = std::max(mx, static_cast<double>(logits[c * n + j]));
    double s = 0.0;
    for (int64_t c = 0; c < k; ++c) s += std::exp(logits[c * n + j] - mx);
    for (int64_t c = 0; c < k; ++c) (*probs)[c * n + j] = std::exp(logits[c * n + j] - mx) / s;
    const int64_t label = static_cast<int64_t>(labels[j]);
    (*loss)[j] = -((logits[label * n + j] - mx) - std::log(s));
  }
}

}  // namespace testing
}  // namespace colonnade
