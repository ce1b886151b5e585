#include "core/op_shapes.h"

#include "core/log.h"

namespace colonnade::op_shapes {

void SameSize(const Tensor& a, const Tensor& b, const char* what) {
  CHECK_EQ(a.size(), b.size()) << what << ": " << a.shape().ToString() << " vs "
                               << b.shape().ToString();
}

void CHWN(const Tensor& t, const char* what) {
  CHECK_EQ(t.shape().rank(), 4) << what << " must be CHWN, got " << t.shape().ToString();
}

void AllSameSize(const Tensor& x, std::initializer_list<const Tensor*> same, const char* what) {
  for (const Tensor* t : same) SameSize(x, *t, what);
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

}  // namespace colonnade::op_shapes
