#include "core/op_shapes.h"

#include <algorithm>

#include "core/log.h"
#include "core/results.h"

namespace colonnade::op_shapes {

void SameSize(const Tensor& a, const Tensor& b, const char* what) {
  CHECK_EQ(a.size(), b.size()) << what << ": " << a.shape().ToString() << " vs "
                               << b.shape().ToString();
}

void CHWN(const Tensor& t, const char* what) {
  CHECK_EQ(t.shape().rank(), 4) << what << " must be CHWN, got " << t.shape().ToString();
}

void CopyChannels(const Tensor& part, int64_t c0, const Tensor& whole, const char* what) {
  CHWN(part, what);
  CHWN(whole, what);
  CHECK(part.h() == whole.h() && part.w() == whole.w() && part.n() == whole.n() && c0 >= 0 &&
        c0 + part.c() <= whole.c())
      << what << " " << part.shape().ToString() << " at " << c0 << " of "
      << whole.shape().ToString();
}

void Conv(const Tensor& x, const Tensor& w, const Tensor& y, const ConvParams& p) {
  CHWN(x, "conv input");
  CHWN(y, "conv output");
  CHECK_EQ(w.shape().rank(), 4) << "conv weight must be [F][C/g][KH][KW]";
  CHECK(p.groups >= 1 && x.c() % p.groups == 0 && y.c() % p.groups == 0)
      << "conv: C=" << x.c() << " F=" << y.c() << " groups=" << p.groups;
  CHECK_GE(p.stride, 1) << "conv stride";
  CHECK_EQ(y.n(), x.n()) << "conv: batch of output";
  CHECK_EQ(y.h(), ConvOutSize(x.h(), p.kernel_h, p.stride, p.pad)) << "conv output height";
  CHECK_EQ(y.w(), ConvOutSize(x.w(), p.kernel_w, p.stride, p.pad)) << "conv output width";
  const int64_t cg = x.c() / p.groups;
  CHECK(w.shape() == Shape({y.c(), cg, p.kernel_h, p.kernel_w}))
      << "conv weight " << w.shape().ToString() << ", expected [" << y.c() << "][" << cg << "]["
      << p.kernel_h << "][" << p.kernel_w << "]";
}

void Bias(const Tensor& y, const Tensor& b, const char* what) {
  CHECK_GE(y.shape().rank(), 1) << what << ": scalar " << y.shape().ToString();
  CHECK_EQ(b.size(), y.shape()[0])
      << what << ": bias of " << b.size() << " for " << y.shape().ToString();
}

void Pool(const Tensor& x, const Tensor& y, const PoolParams& p) {
  CHWN(x, "pool input");
  CHWN(y, "pool output");
  CHECK(p.size >= 1 && p.stride >= 1 && p.pad >= 0 && p.pad < p.size)
      << "pool size " << p.size << " stride " << p.stride << " pad " << p.pad;
  const int64_t oh = PoolOutSize(x.h(), p.size, p.stride, p.pad, p.ceil_mode);
  const int64_t ow = PoolOutSize(x.w(), p.size, p.stride, p.pad, p.ceil_mode);
  CHECK(y.c() == x.c() && y.n() == x.n() && y.h() == oh && y.w() == ow)
      << "pool " << x.shape().ToString() << " -> " << y.shape().ToString() << " (size " << p.size
      << ", stride " << p.stride << ", pad " << p.pad << (p.ceil_mode ? ", ceil" : ", floor")
      << " mode: expected " << oh << "x" << ow << ")";
}

void PoolBackward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                  const PoolParams& p) {
  Pool(x, y, p);
  SameSize(y, dy, "PoolBackward dy");
  SameSize(x, dx, "PoolBackward dx");
}

void GlobalAvgPool(const Tensor& x, const Tensor& y, const char* what) {
  CHWN(x, what);
  CHECK(y.shape() == Shape::CHWN(x.c(), 1, 1, x.n()))
      << what << ": " << x.shape().ToString() << " vs " << y.shape().ToString() << ", expected "
      << x.c() << "x1x1x" << x.n();
}

namespace {
void AllSameSize(const Tensor& x, std::initializer_list<const Tensor*> same, const char* what) {
  for (const Tensor* t : same) SameSize(x, *t, what);
}
}  // namespace

void LrnCross(const Tensor& x, const LrnCrossParams& p, std::initializer_list<const Tensor*> same,
              const char* what) {
  CHWN(x, what);
  CHECK(p.groups >= 1 && x.c() % p.groups == 0 && p.size >= 1)
      << what << ": " << x.c() << " channels, groups " << p.groups << ", size " << p.size;
  AllSameSize(x, same, what);
}

void LrnWithin(const Tensor& x, const LrnWithinParams& p, std::initializer_list<const Tensor*> same,
               const char* what) {
  CHWN(x, what);
  CHECK_GE(p.size, 1) << what << ": rnorm size";
  AllSameSize(x, same, what);
}

void BatchNorm(const Tensor& x, std::initializer_list<const Tensor*> same,
               std::initializer_list<const Tensor*> per_channel, const char* what) {
  CHWN(x, what);
  AllSameSize(x, same, what);
  for (const Tensor* t : per_channel)
    CHECK_EQ(t->size(), x.c()) << what << ": per-channel tensor " << t->shape().ToString()
                               << " for " << x.shape().ToString();
}

void Dropout(const Tensor& x, const Tensor& y, const Tensor& mask, const DropoutParams& p) {
  CHWN(x, "Dropout x");
  SameSize(x, y, "Dropout y");
  SameSize(x, mask, "Dropout mask");
  const int64_t gb = p.global_batch > 0 ? p.global_batch : x.n();
  CHECK(p.image_offset >= 0 && p.image_offset + x.n() <= gb)
      << "dropout: images [" << p.image_offset << ", " << p.image_offset + x.n()
      << ") outside the global batch of " << gb;
}

SoftmaxDims Softmax(const Tensor& scores, const Tensor& labels, const Tensor& same,
                    const Tensor* loss, const char* what) {
  CHECK_GE(scores.shape().rank(), 1) << what << ": scalar scores";
  SoftmaxDims d;
  d.batch = scores.shape()[scores.shape().rank() - 1];
  d.classes = scores.size() / std::max<int64_t>(d.batch, 1);
  CHECK_EQ(labels.size(), d.batch) << what << ": labels " << labels.shape().ToString()
                                   << " for scores " << scores.shape().ToString();
  SameSize(scores, same, what);
  if (loss != nullptr) {
    CHECK_EQ(loss->size(), d.batch) << what << ": loss " << loss->shape().ToString()
                                    << " for scores " << scores.shape().ToString();
  }
  return d;
}

SoftmaxDims Results(const Tensor& probs, const Tensor& labels, const Tensor& loss,
                    const Tensor& totals) {
  CHECK_EQ(totals.size(), kResultTotalsFloats)
      << "AccumulateResults: totals " << totals.shape().ToString() << " are not a ResultTotals";
  return Softmax(probs, labels, probs, &loss, "AccumulateResults");
}

}  // namespace colonnade::op_shapes
