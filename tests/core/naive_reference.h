// Naive double-precision references for the layer tests, written from the definitions in
// ops.h with straight loops and nothing shared with cpu_ops.cc: each output element is
// computed on its own from its definition, the way one would check it by hand.
#pragma once

#include <cstdint>
#include <vector>

namespace colonnade {
namespace testing {

// A CHWN shape with the element offset ((c*H + h)*W + w)*N + n.
struct Dims {
  int64_t c = 0, h = 0, w = 0, n = 0;
  int64_t size() const { return c * h * w * n; }
  int64_t at(int64_t ci, int64_t hi, int64_t wi, int64_t ni) const {
    return ((ci * h + hi) * w + wi) * n + ni;
  }
};

// y[f][oy][ox][n] = bias[f] + sum_{c in group(f), ky, kx} w[f][c - c0][ky][kx] *
//                   x[c][oy*stride - pad + ky][ox*stride - pad + kx][n]   (0 outside).
std::vector<double> RefConv(const std::vector<float>& x, const Dims& xd,
                            const std::vector<float>& w, int64_t filters, int kh, int kw,
                            int stride, int pad, int groups, const std::vector<float>* bias,
                            Dims* yd);

// y[f][n] = bias[f] + sum_i w[f][i] x[i][n], x an I x N matrix.
std::vector<double> RefFullyConnected(const std::vector<float>& x, int64_t inputs, int64_t n,
                                      const std::vector<float>& w, int64_t outputs,
                                      const std::vector<float>& bias);

// Output size of a ceil-mode pool by enumeration: add windows (starting at -pad, every
// `stride`) until one reaches the end of the padded input, then drop a last window that
// starts in the padding.
int64_t RefPoolOutSize(int64_t in, int size, int stride, int pad);
// Max or average (over in-image pixels) of each clipped window.
std::vector<double> RefPool(const std::vector<float>& x, const Dims& xd, bool max, int size,
                            int stride, int pad, Dims* yd);
// dx of max pooling with dy routed to the first maximum of each window in row-major
// window order (ties included).
std::vector<double> RefMaxPoolBackward(const std::vector<float>& x, const Dims& xd,
                                       const std::vector<float>& dy, int size, int stride, int pad);
std::vector<double> RefGlobalAvgPool(const std::vector<float>& x, const Dims& xd);

std::vector<double> RefLrnCross(const std::vector<float>& x, const Dims& xd, int size, double alpha,
                                double beta, double k, bool alpha_over_size, int groups,
                                std::vector<double>* denom);
std::vector<double> RefLrnWithin(const std::vector<float>& x, const Dims& xd, int size,
                                 double alpha, double beta, double k, std::vector<double>* denom);

// Training-mode batch norm; mean, biased and unbiased variance per channel.
std::vector<double> RefBatchNormTrain(const std::vector<float>& x, const Dims& xd,
                                      const std::vector<float>& gamma,
                                      const std::vector<float>& beta, double eps,
                                      std::vector<double>* mean, std::vector<double>* var,
                                      std::vector<double>* unbiased_var);
std::vector<double> RefBatchNormInfer(const std::vector<float>& x, const Dims& xd,
                                      const std::vector<float>& gamma,
                                      const std::vector<float>& beta,
                                      const std::vector<float>& mean, const std::vector<float>& var,
                                      double eps);

// logits K x N; probs K x N and loss N.
void RefSoftmaxCrossEntropy(const std::vector<float>& logits, int64_t k, int64_t n,
                            const std::vector<float>& labels, std::vector<double>* probs,
                            std::vector<double>* loss);

std::vector<double> ToDouble(const std::vector<float>& v);

}  // namespace testing
}  // namespace colonnade
