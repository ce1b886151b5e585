// The batch-norm family's CUDA kernels (src/cuda/ops/batchnorm.cu) against CpuOps, the fused
// ReLU against the unfused passes, and bf16 storage against the float kernels.

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "ops_test_util.h"

namespace colonnade {
namespace testing {
namespace {

// Small channels (one block each) and long ones (inner 12,920: split over blocks, the
// partial sums added in order; the last split shorter).
class CudaBatchNormTest : public CudaTest, public ::testing::WithParamInterface<Shape> {};

TEST_P(CudaBatchNormTest, AgreesWithTheCpu) {
  const Shape s = GetParam(), c{s[0]};
  BatchNormParams p;
  Tensor x = RandomCpu(s, 101, -2.0f, 3.0f), gamma = RandomCpu(c, 102), beta = RandomCpu(c, 103);
  Tensor rm = RandomCpu(c, 104), rv = RandomCpu(c, 105, 0.5f, 2.0f);
  Tensor grm = OnGpu(rm), grv = OnGpu(rv);
  Tensor y(s, Device::kCPU), sm(c, Device::kCPU), si(c, Device::kCPU), sc(c, Device::kCPU);
  Cpu().BatchNormForwardTrain(x, gamma, beta, y, rm, rv, sm, si, sc, p, false);
  Tensor gx = OnGpu(x), gg = OnGpu(gamma), gb = OnGpu(beta);
  Tensor gy = Poisoned(s, Device::kCUDA), gsm = Poisoned(c, Device::kCUDA),
         gsi = Poisoned(c, Device::kCUDA), gsc = Poisoned(c, Device::kCUDA);
  Gpu().BatchNormForwardTrain(gx, gg, gb, gy, grm, grv, gsm, gsi, gsc, p, false);
  EXPECT_CLOSE(gy, y);
  EXPECT_CLOSE(gsm, sm);
  EXPECT_CLOSE(gsi, si);
  EXPECT_CLOSE(gsc, sc);
  EXPECT_CLOSE(grm, rm);
  EXPECT_CLOSE(grv, rv);
  // The recomputation of the backward pass (docs/MEMORY.md): bitwise the forward's y.
  Tensor ga = Poisoned(s, Device::kCUDA);
  Gpu().BatchNormApply(gx, gsm, gsc, gb, ga, false);
  EXPECT_BITWISE(ga, gy);

  Tensor yi(s, Device::kCPU);
  Cpu().BatchNormForwardInfer(x, gamma, beta, rm, rv, yi, p);
  Tensor gyi = Poisoned(s, Device::kCUDA);
  Gpu().BatchNormForwardInfer(gx, gg, gb, OnGpu(rm), OnGpu(rv), gyi, p);
  EXPECT_CLOSE(gyi, yi);

  Tensor dy = RandomCpu(s, 106), dx(s, Device::kCPU), dg(c, Device::kCPU), db(c, Device::kCPU);
  Cpu().BatchNormBackward(x, gamma, sm, si, nullptr, dy, dx, dg, db);
  Tensor gdx = Poisoned(s, Device::kCUDA), gdg = Poisoned(c, Device::kCUDA),
         gdb = Poisoned(c, Device::kCUDA);
  Gpu().BatchNormBackward(gx, gg, OnGpu(sm), OnGpu(si), nullptr, OnGpu(dy), gdx, gdg, gdb);
  EXPECT_CLOSE(gdx, dx);
  EXPECT_CLOSE(gdg, dg);
  EXPECT_CLOSE(gdb, db);
}

// Batch norm + ReLU fused (the relu arguments of Ops::BatchNorm*): the CUDA passes against the
// same GPU's primitives in the unfused order (batch norm, then ReluForward; ReluBackward into a
// scratch tensor, then the batch norm's backward), bit for bit: y, the saved and running
// statistics, the recomputation's y, and dx, dgamma, dbeta with dy masked by the ReLU
// (about half the elements rectified: x straddles the mean).
TEST_P(CudaBatchNormTest, ReluFusedAsUnfused) {
  const Shape s = GetParam(), c{s[0]};
  BatchNormParams p;
  Tensor x = OnGpu(RandomCpu(s, 121, -2.0f, 3.0f)), gamma = OnGpu(RandomCpu(c, 122)),
         beta = OnGpu(RandomCpu(c, 123));
  struct Run {
    Tensor y, rm, rv, sm, si, sc, apply, dx, dg, db;
  };
  // mode 0: the unfused passes; 1: fused, the mask read from y; 2: fused, the mask recomputed
  // from x (mask_scale, mask_shift: the save_scale and beta of the forward).
  auto run = [&](int mode) {
    const bool fused = mode > 0;
    Run r{Poisoned(s, Device::kCUDA),           OnGpu(RandomCpu(c, 124)),
          OnGpu(RandomCpu(c, 125, 0.5f, 2.0f)), Poisoned(c, Device::kCUDA),
          Poisoned(c, Device::kCUDA),           Poisoned(c, Device::kCUDA),
          Poisoned(s, Device::kCUDA),           Poisoned(s, Device::kCUDA),
          Poisoned(c, Device::kCUDA),           Poisoned(c, Device::kCUDA)};
    Tensor dy = OnGpu(RandomCpu(s, 126));
    Ops& o = Gpu();
    if (fused) {
      o.BatchNormForwardTrain(x, gamma, beta, r.y, r.rm, r.rv, r.sm, r.si, r.sc, p, true);
      o.BatchNormApply(x, r.sm, r.sc, beta, r.apply, true);
      if (mode == 2) {
        o.BatchNormBackward(x, gamma, r.sm, r.si, &r.y, dy, r.dx, r.dg, r.db, &r.sc, &beta);
      } else {
        o.BatchNormBackward(x, gamma, r.sm, r.si, &r.y, dy, r.dx, r.dg, r.db);
      }
    } else {
      o.BatchNormForwardTrain(x, gamma, beta, r.y, r.rm, r.rv, r.sm, r.si, r.sc, p, false);
      o.ReluForward(r.y, r.y);
      o.BatchNormApply(x, r.sm, r.sc, beta, r.apply, false);
      o.ReluForward(r.apply, r.apply);
      Tensor masked(dy.shape(), Device::kCUDA);
      o.ReluBackward(r.y, dy, masked);
      o.BatchNormBackward(x, gamma, r.sm, r.si, nullptr, masked, r.dx, r.dg, r.db);
    }
    return r;
  };
  const Run a = run(0), b = run(1), m = run(2);
  int rectified = 0;
  for (float v : a.y.ToHost()) rectified += v == 0.0f;
  EXPECT_GT(rectified, s.elements() / 5) << "the ReLU should zero a good part of y";
  const std::pair<const char*, std::pair<const Tensor*, const Tensor*>> outs[] = {
      {"y", {&a.y, &b.y}},
      {"running_mean", {&a.rm, &b.rm}},
      {"running_var", {&a.rv, &b.rv}},
      {"save_mean", {&a.sm, &b.sm}},
      {"save_invstd", {&a.si, &b.si}},
      {"save_scale", {&a.sc, &b.sc}},
      {"apply", {&a.apply, &b.apply}},
      {"dx", {&a.dx, &b.dx}},
      {"dgamma", {&a.dg, &b.dg}},
      {"dbeta", {&a.db, &b.db}}};
  for (const auto& [name, t] : outs)
    EXPECT_TRUE(BitwiseEqual(t.second->ToHost(), t.first->ToHost())) << name;
  EXPECT_TRUE(BitwiseEqual(b.apply.ToHost(), b.y.ToHost())) << "recomputed y";
  for (const auto& [name, t] :
       {std::make_pair("dx (mask from x)", std::make_pair(&a.dx, &m.dx)),
        std::make_pair("dgamma (mask from x)", std::make_pair(&a.dg, &m.dg)),
        std::make_pair("dbeta (mask from x)", std::make_pair(&a.db, &m.db))})
    EXPECT_TRUE(BitwiseEqual(t.second->ToHost(), t.first->ToHost())) << name;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaBatchNormTest,
                         ::testing::Values(Shape{5, 4, 3, 33}, Shape{3, 17, 19, 40}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return "c" + std::to_string(info.param[0]) + "_inner" +
                                  std::to_string(info.param.elements() / info.param[0]);
                         });

// Batch norm, every entry, plain and with the fused ReLU: x / dx in st.x, y / dy / relu_y in
// st.y; y and dx as the float run's rounded once, the statistics (saved and running) and
// dgamma, dbeta as the float run's. Channels split over blocks (inner 12,920) and not.
TEST_F(CudaTest, BatchNormBf16Storage) {
  const Shape shapes[] = {Shape{5, 4, 3, 33}, Shape{3, 17, 19, 40}, Shape{48, 3, 3, 8},
                          Shape{3, 5, 5, 1}, Shape{5, 3, 3, 7}};
  BatchNormParams p;
  for (const Shape& s : shapes) {
    const Shape c{s[0]};
    const Tensor x = RandomCpu(s, 181, -2.0f, 3.0f), dy = RandomCpu(s, 182);
    const Tensor gamma = OnGpu(RandomCpu(c, 183)), beta = OnGpu(RandomCpu(c, 184));
    const Tensor rm0 = RandomCpu(c, 185), rv0 = RandomCpu(c, 186, 0.5f, 2.0f);
    for (const StoragePair& st : kStoragePairs) {
      for (const bool relu : {false, true}) {
        const std::string what =
            absl::StrFormat("%s%s, %s", relu ? "relu, " : "", s.ToString(), PairName(st));
        Tensor gx = OnGpuAs(x, st.x), xw = Widened(gx);
        struct Run {
          Tensor y, rm, rv, sm, si, sc, apply, infer, dx, dg, db;
        };
        auto fresh = [&](DType yt, DType xt) {
          return Run{PoisonedAs(s, yt),
                     OnGpu(rm0),
                     OnGpu(rv0),
                     Poisoned(c, Device::kCUDA),
                     Poisoned(c, Device::kCUDA),
                     Poisoned(c, Device::kCUDA),
                     PoisonedAs(s, yt),
                     PoisonedAs(s, yt),
                     PoisonedAs(s, xt),
                     Poisoned(c, Device::kCUDA),
                     Poisoned(c, Device::kCUDA)};
        };
        Run ref = fresh(DType::kFloat32, DType::kFloat32), got = fresh(st.y, st.x);
        Ops& o = Gpu();
        auto forward = [&](const Tensor& in, Run& r) {
          o.BatchNormForwardTrain(in, gamma, beta, r.y, r.rm, r.rv, r.sm, r.si, r.sc, p, relu);
          o.BatchNormApply(in, r.sm, r.sc, beta, r.apply, relu);
          o.BatchNormForwardInfer(in, gamma, beta, OnGpu(rm0), OnGpu(rv0), r.infer, p);
        };
        forward(xw, ref);
        forward(gx, got);
        // Backward: dy (and relu_y = the y of its run) stored as st.y.
        Tensor gdy = OnGpuAs(dy, st.y), dyw = Widened(gdy);
        auto backward = [&](const Tensor& in, const Tensor& relu_y, const Tensor& g, Run& r) {
          o.BatchNormBackward(in, gamma, ref.sm, ref.si, relu ? &relu_y : nullptr, g, r.dx, r.dg,
                              r.db);
        };
        backward(xw, Widened(got.y), dyw, ref);
        backward(gx, got.y, gdy, got);
        if (relu) {
          // The mask recomputed from x as stored (BnApply rounded to st.y): got's very bits.
          Run again = fresh(st.y, st.x);
          o.BatchNormBackward(gx, gamma, ref.sm, ref.si, &got.y, gdy, again.dx, again.dg, again.db,
                              &got.sc, &beta);
          EXPECT_TRUE(BitwiseEqual(again.dx.ToHost(), got.dx.ToHost()))
              << what << ": dx, mask from x";
          EXPECT_TRUE(BitwiseEqual(again.dg.ToHost(), got.dg.ToHost()))
              << what << ": dgamma, mask from x";
          EXPECT_TRUE(BitwiseEqual(again.db.ToHost(), got.db.ToHost()))
              << what << ": dbeta, mask from x";
        }
        const std::pair<const char*, std::pair<const Tensor*, const Tensor*>> same[] = {
            {"running_mean", {&ref.rm, &got.rm}}, {"running_var", {&ref.rv, &got.rv}},
            {"save_mean", {&ref.sm, &got.sm}},    {"save_invstd", {&ref.si, &got.si}},
            {"save_scale", {&ref.sc, &got.sc}},   {"dgamma", {&ref.dg, &got.dg}},
            {"dbeta", {&ref.db, &got.db}}};
        for (const auto& [name, t] : same)
          EXPECT_TRUE(BitwiseEqual(t.second->ToHost(), t.first->ToHost())) << what << ": " << name;
        const std::pair<const char*, std::pair<const Tensor*, const Tensor*>> rounded[] = {
            {"y", {&ref.y, &got.y}},
            {"apply", {&ref.apply, &got.apply}},
            {"infer", {&ref.infer, &got.infer}},
            {"dx", {&ref.dx, &got.dx}}};
        for (const auto& [name, t] : rounded) {
          EXPECT_TRUE(
              BitwiseEqual(t.second->ToHost(), StoredAs(t.first->ToHost(), t.second->dtype())))
              << what << ": " << name;
        }
      }
    }
  }
}

// The residual sum with its batch norms in one pass (Ops::AddNormalized, Fusions::bn_add):
// bitwise BatchNormApply into the stored type then Add, in float and bf16, with and without
// the ReLU, one or both operands normalised, aligned and one element off; and the statistics-only
// training forward (write_y false) saves the same statistics and leaves y alone.
TEST_F(CudaTest, AddNormalizedAsApplyThenAdd) {
  BatchNormParams p;
  for (const Shape& s : {Shape{5, 4, 3, 33}, Shape{3, 17, 19, 40}}) {
    const Shape c{s[0]};
    const Tensor gamma = OnGpu(RandomCpu(c, 401)), beta = OnGpu(RandomCpu(c, 402));
    for (const DType t : kTypes) {
      for (const int64_t offset : {0, 1}) {
        const Tensor xa = OnGpuAsAt(RandomCpu(s, 403, -2.0f, 3.0f), t, offset);
        const Tensor xb = OnGpuAsAt(RandomCpu(s, 404, -1.0f, 1.0f), t, offset);
        Tensor rm = OnGpu(RandomCpu(c, 405)), rv = OnGpu(RandomCpu(c, 406, 0.5f, 2.0f));
        Tensor ya = PoisonedAsAt(s, t, offset), sm = Poisoned(c, Device::kCUDA),
               si = Poisoned(c, Device::kCUDA), sc = Poisoned(c, Device::kCUDA);
        Gpu().BatchNormForwardTrain(xa, gamma, beta, ya, rm, rv, sm, si, sc, p, false);
        // Statistics only: the same statistics, y untouched (still the poison).
        Tensor rm2 = OnGpu(RandomCpu(c, 405)), rv2 = OnGpu(RandomCpu(c, 406, 0.5f, 2.0f));
        Tensor y2 = PoisonedAsAt(s, t, offset), sm2 = Poisoned(c, Device::kCUDA),
               si2 = Poisoned(c, Device::kCUDA), sc2 = Poisoned(c, Device::kCUDA);
        Gpu().BatchNormForwardTrain(xa, gamma, beta, y2, rm2, rv2, sm2, si2, sc2, p, false,
                                    /*write_y=*/false);
        EXPECT_BITWISE(sm2, sm);
        EXPECT_BITWISE(si2, si);
        EXPECT_BITWISE(sc2, sc);
        EXPECT_BITWISE(rm2, rm);
        EXPECT_BITWISE(rv2, rv);
        for (float v : y2.ToHost()) ASSERT_TRUE(std::isnan(v)) << "y written";
        for (const bool relu : {false, true}) {
          for (const int which : {0, 1, 2}) {  // a, b or both normalised
            const std::string what =
                absl::StrFormat("%s %s offset %d relu %d operands %d", s.ToString(), DTypeName(t),
                                offset, relu, which);
            Ops::AddOperand a, b;
            Tensor yb = PoisonedAsAt(s, t, offset);
            if (which != 1) a = Ops::AddOperand{&xa, &sm, &sc, &beta, t};
            if (which != 0) {
              b = Ops::AddOperand{&xb, &sm, &sc, &beta, t};
              Gpu().BatchNormApply(xb, sm, sc, beta, yb, false);
            }
            if (which == 1) a.t = &xa;
            if (which == 0) b.t = &xb;
            Tensor ref = PoisonedAsAt(s, t, offset), got = PoisonedAsAt(s, t, offset);
            Gpu().Add(which != 1 ? ya : xa, which != 0 ? yb : xb, ref, relu);
            Gpu().AddNormalized(a, b, got, relu);
            EXPECT_TRUE(BitwiseEqual(got.ToHost(), ref.ToHost())) << what;
          }
        }
      }
    }
  }
}

// A residual sum's backward with its batch norms' sums (Ops::ReluBackwardBnSums,
// Fusions::add_bn_sums): its dx bitwise ReluBackward's, and each batch norm's BatchNormBackward
// given those sums (skipping its own pass: counted) bitwise the one that takes its own, for
// dx, dgamma and dbeta; in float and bf16, one and two batch norms, aligned (four lanes) and one
// element off (one), channels split over blocks and not, dx in place of dy and apart. A batch
// norm reading another dy, or the same x after the next ConvLayerForward, takes its own sums.
TEST_F(CudaTest, ReluBackwardBnSumsAsApart) {
  auto& cuda = dynamic_cast<cuda::CudaOps&>(Gpu());
  BatchNormParams p;
  for (const Shape& s : {Shape{5, 4, 3, 33}, Shape{3, 17, 19, 40}}) {
    const Shape c{s[0]};
    const Tensor gamma = OnGpu(RandomCpu(c, 411)), beta = OnGpu(RandomCpu(c, 412));
    for (const DType t : kTypes) {
      for (const int64_t offset : {0, 1}) {
        const Tensor x[2] = {OnGpuAsAt(RandomCpu(s, 413, -2.0f, 3.0f), t, offset),
                             OnGpuAsAt(RandomCpu(s, 414, -1.0f, 1.0f), t, offset)};
        Tensor sm[2], si[2];
        for (int k = 0; k < 2; ++k) {  // the forward's saved statistics
          Tensor rm = OnGpu(RandomCpu(c, 415)), rv = OnGpu(RandomCpu(c, 416, 0.5f, 2.0f));
          Tensor y = PoisonedAsAt(s, t, offset), sc = Poisoned(c, Device::kCUDA);
          sm[k] = Poisoned(c, Device::kCUDA);
          si[k] = Poisoned(c, Device::kCUDA);
          Gpu().BatchNormForwardTrain(x[k], gamma, beta, y, rm, rv, sm[k], si[k], sc, p, false);
        }
        const Tensor y = OnGpuAsAt(RandomCpu(s, 417), t, offset);  // about half rectified
        for (const int operands : {1, 2}) {
          for (const bool in_place : {false, true}) {
            const std::string what =
                absl::StrFormat("%s %s offset %d, %d batch norms%s", s.ToString(), DTypeName(t),
                                offset, operands, in_place ? ", in place" : "");
            const Tensor dy = OnGpuAsAt(RandomCpu(s, 418), t, offset);
            Tensor ref = PoisonedAsAt(s, t, offset);
            Gpu().ReluBackward(y, dy, ref);
            Tensor own = OnGpuAsAt(RandomCpu(s, 418), t, offset);
            Tensor got = in_place ? own : PoisonedAsAt(s, t, offset);
            const Ops::BnSumsOperand b{&x[1], &sm[1], &si[1]};
            Gpu().ReluBackwardBnSums(y, in_place ? own : dy, got,
                                     Ops::BnSumsOperand{&x[0], &sm[0], &si[0]},
                                     operands == 2 ? &b : nullptr);
            EXPECT_TRUE(BitwiseEqual(got.ToHost(), ref.ToHost())) << what;
            for (int k = 0; k < operands; ++k) {
              Tensor dx_ref = PoisonedAsAt(s, t, offset), dx = PoisonedAsAt(s, t, offset);
              Tensor dg_ref = Poisoned(c, Device::kCUDA), db_ref = Poisoned(c, Device::kCUDA);
              Tensor dg = Poisoned(c, Device::kCUDA), db = Poisoned(c, Device::kCUDA);
              Gpu().BatchNormBackward(x[k], gamma, sm[k], si[k], nullptr, ref, dx_ref, dg_ref,
                                      db_ref);
              const int64_t before = cuda.batch_norms_from_sum_sums();
              Gpu().BatchNormBackward(x[k], gamma, sm[k], si[k], nullptr, got, dx, dg, db);
              EXPECT_EQ(cuda.batch_norms_from_sum_sums(), before + 1) << what << " bn " << k;
              EXPECT_TRUE(BitwiseEqual(dx.ToHost(), dx_ref.ToHost())) << what << " bn " << k;
              EXPECT_BITWISE(dg, dg_ref);
              EXPECT_BITWISE(db, db_ref);
            }
          }
        }
        // Not for another dy, nor after a new step's first convolution.
        const Tensor dy = OnGpuAsAt(RandomCpu(s, 419), t, offset);
        Tensor got = PoisonedAsAt(s, t, offset), dx = PoisonedAsAt(s, t, offset);
        Tensor dg = Poisoned(c, Device::kCUDA), db = Poisoned(c, Device::kCUDA);
        Gpu().ReluBackwardBnSums(y, dy, got, Ops::BnSumsOperand{&x[0], &sm[0], &si[0]}, nullptr);
        const int64_t before = cuda.batch_norms_from_sum_sums();
        Gpu().BatchNormBackward(x[0], gamma, sm[0], si[0], nullptr, dy, dx, dg, db);
        EXPECT_EQ(cuda.batch_norms_from_sum_sums(), before);
        Tensor conv_y(Shape{1, 1, 1, 8}, Device::kCUDA), w(Shape{1, 1, 1, 1}, Device::kCUDA);
        Gpu().ConvLayerForward(Tensor(Shape{1, 1, 1, 8}, Device::kCUDA), w, nullptr, false, conv_y,
                               ConvParams{});
        Gpu().BatchNormBackward(x[0], gamma, sm[0], si[0], nullptr, got, dx, dg, db);
        EXPECT_EQ(cuda.batch_norms_from_sum_sums(), before);
      }
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
