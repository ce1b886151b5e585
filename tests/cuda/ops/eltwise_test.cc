// The element-wise family's CUDA kernels (src/cuda/ops/eltwise.cu) against CpuOps, and in
// bf16 storage against the float kernels: fill, copy, axpby, add (with the fused ReLU), ReLU,
// bias and its gradient (and the tensor-core convolutions' bf16 gradient operand, which sums it),
// channel blocks, the whole-tensor sum.

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "cuda/kernels.h"
#include "ops_test_util.h"

namespace colonnade {
namespace testing {
namespace {

// ---- element-wise and memory -------------------------------------------------------------------
TEST_F(CudaTest, FillCopyAxpbyAdd) {
  const Shape s{5, 3, 7, 33};
  Tensor x = RandomCpu(s, 21), y = RandomCpu(s, 22);
  Tensor gy = Poisoned(s, Device::kCUDA);
  Gpu().Fill(gy, 0.5f);
  Tensor half(s, Device::kCPU);
  Cpu().Fill(half, 0.5f);
  EXPECT_BITWISE(gy, half);

  Tensor gx = OnGpu(x);
  Tensor gc = Poisoned(s, Device::kCUDA);
  Gpu().Copy(gx, gc);
  EXPECT_BITWISE(gc, x);

  Tensor ref = y.To(Device::kCPU);
  Cpu().Axpby(0.7f, x, -1.3f, ref);
  Tensor gz = OnGpu(y);
  Gpu().Axpby(0.7f, gx, -1.3f, gz);
  EXPECT_BITWISE(gz, ref);

  Tensor ref0(s, Device::kCPU);
  Cpu().Fill(ref0, kNaN);
  Cpu().Axpby(2.5f, x, 0.0f, ref0);  // beta = 0: y is not read
  Tensor gz0 = Poisoned(s, Device::kCUDA);
  Gpu().Axpby(2.5f, gx, 0.0f, gz0);
  EXPECT_BITWISE(gz0, ref0);

  Tensor sum_ref(s, Device::kCPU);
  Cpu().Add(x, y, sum_ref);
  Tensor gsum = Poisoned(s, Device::kCUDA);
  Gpu().Add(gx, OnGpu(y), gsum);
  EXPECT_BITWISE(gsum, sum_ref);
  Tensor galias = OnGpu(x);  // in place: y = y + b
  Gpu().Add(galias, OnGpu(y), galias);
  EXPECT_BITWISE(galias, sum_ref);
}

TEST_F(CudaTest, CopyChannelsAndSum) {
  Tensor a = RandomCpu(Shape{3, 5, 5, 7}, 31), b = RandomCpu(Shape{5, 5, 5, 7}, 32);
  Tensor ref(Shape{8, 5, 5, 7}, Device::kCPU);
  Cpu().CopyChannelsIn(a, 0, ref);
  Cpu().CopyChannelsIn(b, 3, ref);
  Tensor g = Poisoned(Shape{8, 5, 5, 7}, Device::kCUDA);
  Gpu().CopyChannelsIn(OnGpu(a), 0, g);
  Gpu().CopyChannelsIn(OnGpu(b), 3, g);
  EXPECT_BITWISE(g, ref);
  Tensor out = Poisoned(Shape{5, 5, 5, 7}, Device::kCUDA);
  Gpu().CopyChannelsOut(g, 3, out);
  EXPECT_BITWISE(out, b);

  Tensor big = RandomCpu(Shape{kEmulated ? 1000 : 1000003}, 33, 0.0f, 1.0f);
  const double want = Cpu().Sum(big), got = Gpu().Sum(OnGpu(big));
  EXPECT_NEAR(got, want, 1e-9 * std::abs(want));
}

TEST_F(CudaTest, BiasForwardBackward) {
  for (const Shape& s :
       {Shape{5, 7, 7, 33}, Shape{96, 3, 3, 128}, Shape{4096, 1, 1, 7}, Shape{3, 64, 64, 128}}) {
    if (kEmulated && s.elements() > 2000000) continue;
    Tensor y = RandomCpu(s, 41), b = RandomCpu(Shape{s[0]}, 42);
    Tensor gy = OnGpu(y);
    Cpu().AddBias(y, b);
    Gpu().AddBias(gy, OnGpu(b));
    EXPECT_BITWISE(gy, y) << s.ToString();

    Tensor dy = RandomCpu(s, 43);
    Tensor db(Shape{s[0]}, Device::kCPU);
    Cpu().BiasBackward(dy, db);
    Tensor gdb = Poisoned(Shape{s[0]}, Device::kCUDA);
    Gpu().BiasBackward(OnGpu(dy), gdb);
    EXPECT_CLOSE(gdb, db) << s.ToString();
  }
}

// The residual sum + ReLU pass (Ops::Add with relu) against the GPU primitives (Add, then
// ReluForward in place)
// and both against the CPU: bitwise; an odd size (one element per thread step) and a multiple
// of 4 (quads: BinaryKernel's V = 4).
TEST_F(CudaTest, AddReluFusedAsUnfused) {
  for (const Shape& s : {Shape{7, 5, 5, 33}, Shape{4, 5, 5, 32}}) {
    Tensor a = OnGpu(RandomCpu(s, 131)), b = OnGpu(RandomCpu(s, 132));
    Tensor fused = Poisoned(s, Device::kCUDA), apart = Poisoned(s, Device::kCUDA);
    Gpu().Add(a, b, fused, true);
    Gpu().Add(a, b, apart);
    Gpu().ReluForward(apart, apart);
    EXPECT_TRUE(BitwiseEqual(fused.ToHost(), apart.ToHost())) << s.ToString();
    Tensor y(s, Device::kCPU);
    Cpu().Add(a.To(Device::kCPU), b.To(Device::kCPU), y, true);
    EXPECT_BITWISE(fused, y);
    Tensor sum = Poisoned(s, Device::kCUDA), sum_ref(s, Device::kCPU);
    Gpu().Add(a, b, sum);
    Cpu().Add(a.To(Device::kCPU), b.To(Device::kCPU), sum_ref);
    EXPECT_BITWISE(sum, sum_ref);
  }
}

// ---- activations, dropout, loss, optimiser
// ------------------------------------------------------------
TEST_F(CudaTest, Relu) {
  const Shape s{7, 5, 5, 33};
  Tensor x = RandomCpu(s, 111), y(s, Device::kCPU);
  Cpu().ReluForward(x, y);
  Tensor gx = OnGpu(x), gy = Poisoned(s, Device::kCUDA);
  Gpu().ReluForward(gx, gy);
  EXPECT_BITWISE(gy, y);
  Gpu().ReluForward(gx, gx);  // in place
  EXPECT_BITWISE(gx, y);
  Tensor dy = RandomCpu(s, 112), dx(s, Device::kCPU);
  Cpu().ReluBackward(y, dy, dx);
  Tensor gdy = OnGpu(dy);
  Gpu().ReluBackward(gy, gdy, gdy);  // in place
  EXPECT_BITWISE(gdy, dx);
}

// GradToBf16Gpu with bf16 dy and mask against the float overload on the widened values: the
// same bf16 out and the same row sums exactly. The widened values are the same floats, and
// the launch makes the same choices for both (quads when inner is a multiple of 4 and the
// pointers are aligned to 4 elements, the same chunks and splits), so every thread adds the
// same values in the same order, and the partials are combined in the same order too.
// Rows of 79 (elements), rows of 12,920 in splits (quads), the same one element off
// alignment (elements); out null (bf16: sums only).
TEST_F(CudaTest, GradToBf16Bf16Storage) {
  struct Case {
    int64_t rows, inner, offset;
  };
  for (const Case k : {Case{13, 79, 0}, Case{3, 12920, 0}, Case{3, 12920, 1}, Case{5, 64, 0}}) {
    const int64_t n = k.rows * k.inner;
    const Shape s{n + 1};
    Tensor dyv = RandomCpu(s, 101 + k.inner), mv = RandomCpu(s, 102 + k.inner);
    mv.data()[5] = 0.0f;
    mv.data()[6] = -0.0f;
    mv.data()[7] = 1e-41f;  // positive in float, 0 in bf16: the mask is read as stored
    Tensor bdy = OnGpuAs(dyv, DType::kBF16), bm = OnGpuAs(mv, DType::kBF16);
    Tensor fdy = Widened(bdy), fm = Widened(bm);
    const uint16_t* bdy_p = static_cast<const uint16_t*>(bdy.raw()) + k.offset;
    const uint16_t* bm_p = static_cast<const uint16_t*>(bm.raw()) + k.offset;
    const float* fdy_p = fdy.data() + k.offset;
    const float* fm_p = fm.data() + k.offset;
    const std::vector<float> dyw = fdy.ToHost(), mw = fm.ToHost();
    for (const bool with_mask : {true, false}) {
      for (const bool with_out : {true, false}) {
        for (const bool with_sums : {true, false}) {
          if (!with_out && !with_sums) continue;
          const std::string what =
              absl::StrFormat("rows %d x %d, offset %d, mask %d, out %d, sums %d", k.rows, k.inner,
                              k.offset, with_mask, with_out, with_sums);
          Tensor out = PoisonedAs(s, DType::kBF16), ref = PoisonedAs(s, DType::kBF16);
          Tensor sums = Poisoned(Shape{k.rows}, Device::kCUDA);
          Tensor ref_sums = Poisoned(Shape{k.rows}, Device::kCUDA);
          cuda::GradToBf16Gpu(Ctx(), bdy_p, with_mask ? bm_p : nullptr, StorageType::kBF16,
                              with_out ? static_cast<uint16_t*>(out.raw()) + k.offset : nullptr,
                              with_sums ? sums.data() : nullptr, k.rows, k.inner);
          cuda::GradToBf16Gpu(Ctx(), fdy_p, with_mask ? fm_p : nullptr,
                              static_cast<uint16_t*>(ref.raw()) + k.offset,
                              with_sums ? ref_sums.data() : nullptr, k.rows, k.inner);
          if (with_out) {
            const std::vector<float> got = out.ToHost();
            EXPECT_TRUE(BitwiseEqual(got, ref.ToHost())) << what;
            // And on the host: g = dy, or 0 where the mask is not > 0 (exact in bf16).
            std::vector<float> got_g(got.begin() + k.offset, got.begin() + k.offset + n), want_g;
            for (int64_t i = k.offset; i < n + k.offset; ++i)
              want_g.push_back(with_mask && !(mw[size_t(i)] > 0.0f) ? 0.0f : dyw[size_t(i)]);
            EXPECT_TRUE(BitwiseEqual(got_g, want_g)) << what << " (host)";
          } else {
            for (float v : out.ToHost()) ASSERT_TRUE(std::isnan(v)) << what << ": out written";
          }
          if (with_sums) {
            EXPECT_TRUE(BitwiseEqual(sums.ToHost(), ref_sums.ToHost())) << what;
          } else {
            for (float v : sums.ToHost()) ASSERT_TRUE(std::isnan(v)) << what << ": sums written";
          }
        }
      }
    }
  }
}

TEST_F(CudaTest, GradToBf16FloatStorageTyped) {
  for (const int64_t offset : {0, 1}) {
    const int64_t rows = 3, inner = 12920, n = rows * inner;
    const Shape s{n + 1};
    Tensor dy = OnGpu(RandomCpu(s, 103)), mask = OnGpu(RandomCpu(s, 104));
    Tensor out_old = PoisonedAs(s, DType::kBF16), out_new = PoisonedAs(s, DType::kBF16);
    Tensor sums_old = Poisoned(Shape{rows}, Device::kCUDA);
    Tensor sums_new = Poisoned(Shape{rows}, Device::kCUDA);
    cuda::GradToBf16Gpu(Ctx(), dy.data() + offset, mask.data() + offset,
                        static_cast<uint16_t*>(out_old.raw()) + offset, sums_old.data(), rows,
                        inner);
    cuda::GradToBf16Gpu(Ctx(), dy.data() + offset, mask.data() + offset, StorageType::kFloat,
                        static_cast<uint16_t*>(out_new.raw()) + offset, sums_new.data(), rows,
                        inner);
    EXPECT_TRUE(BitwiseEqual(out_new.ToHost(), out_old.ToHost())) << "offset " << offset;
    EXPECT_TRUE(BitwiseEqual(sums_new.ToHost(), sums_old.ToHost())) << "offset " << offset;
  }
}

// Fill: every element bf16(v), for odd counts and 2-byte aligned starts; the elements around
// the filled range stay unwritten.
TEST_F(CudaTest, FillBf16Storage) {
  const float values[] = {0.1f, 1.0f + 1.0f / 256.0f /* a tie: to even */, -3.3e38f, 1e-41f, -2.5f};
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{1001}, int64_t{12921}}) {
    for (const int64_t offset : {0, 1, 3}) {
      for (const float v : values) {
        Tensor base = PoisonedAs(Shape{n + offset + 1}, DType::kBF16);
        Tensor y = base.View(Shape{n}, offset);
        Gpu().Fill(y, v);
        const std::vector<float> got = base.ToHost();
        const std::string what = absl::StrFormat("n %d, offset %d, v %g", n, offset, v);
        for (int64_t i = 0; i < n + offset + 1; ++i) {
          if (i < offset || i >= offset + n) {
            ASSERT_TRUE(std::isnan(got[size_t(i)])) << what << ": element " << i << " written";
          } else {
            ASSERT_TRUE(BitwiseEqual({got[size_t(i)]}, {RoundBf16(v)}))
                << what << ", element " << i;
          }
        }
      }
    }
  }
}

// Add, plain and with the fused ReLU, in all eight storage combinations of a, b, y (odd sizes,
// batch 33 and 8), then in place (the gradient sum g += s: Add(g, s, g)) with bf16 g.
TEST_F(CudaTest, AddBf16Storage) {
  for (const Shape& s : {Shape{5, 3, 7, 33}, Shape{3, 2, 3, 8}, Shape{48, 1, 1, 1}}) {
    const Tensor a = RandomCpu(s, 141), b = RandomCpu(s, 142, -0.01f, 0.01f);
    for (const bool relu : {false, true}) {
      auto op = [&](const Tensor& x, const Tensor& z, Tensor& y) { Gpu().Add(x, z, y, relu); };
      for (DType at : kTypes) {
        for (DType bt : kTypes) {
          for (DType yt : kTypes) {
            const std::string what =
                absl::StrFormat("%s%s: a %s, b %s, y %s", relu ? "AddRelu " : "Add ", s.ToString(),
                                DTypeName(at), DTypeName(bt), DTypeName(yt));
            Tensor ga = OnGpuAs(a, at), gb = OnGpuAs(b, bt);
            Tensor ref = Poisoned(s, Device::kCUDA), gy = PoisonedAs(s, yt);
            op(Widened(ga), Widened(gb), ref);
            op(ga, gb, gy);
            EXPECT_TRUE(BitwiseEqual(gy.ToHost(), StoredAs(ref.ToHost(), yt))) << what;
          }
        }
      }
      for (DType bt : kTypes) {  // in place, bf16 y = a
        Tensor ga = OnGpuAs(a, DType::kBF16), gb = OnGpuAs(b, bt);
        Tensor ref = Poisoned(s, Device::kCUDA);
        op(Widened(ga), Widened(gb), ref);
        op(ga, gb, ga);
        EXPECT_TRUE(BitwiseEqual(ga.ToHost(), StoredAs(ref.ToHost(), DType::kBF16)))
            << (relu ? "AddRelu" : "Add") << " in place, b " << DTypeName(bt) << ", "
            << s.ToString();
      }
    }
  }
}

// ReluForward (x, y; in place) and ReluBackward (y and dy, dx) in the storage pairs, with the
// quads (aligned) and without (one element off), sizes odd and a multiple of 8.
TEST_F(CudaTest, ReluBf16Storage) {
  for (const Shape& s : {Shape{7, 5, 5, 33}, Shape{3, 2, 2, 8}, Shape{5, 1, 1, 1}}) {
    Tensor x = RandomCpu(s, 151), dy = RandomCpu(s, 152);
    x.data()[0] = 1e-41f;  // positive in float, 0 in bf16: the mask is read as stored
    for (const StoragePair& st : kStoragePairs) {
      for (const int64_t offset : {0, 1}) {
        const std::string what =
            absl::StrFormat("%s, offset %d, %s", s.ToString(), offset, PairName(st));
        Tensor gx = OnGpuAsAt(x, st.x, offset), ref = Poisoned(s, Device::kCUDA);
        Tensor gy = PoisonedAsAt(s, st.y, offset);
        Gpu().ReluForward(Widened(gx), ref);
        Gpu().ReluForward(gx, gy);
        EXPECT_TRUE(BitwiseEqual(gy.ToHost(), StoredAs(ref.ToHost(), st.y))) << what;
        // Backward: y and dy st.y (gy: rectified, with its zeros), dx st.x.
        Tensor gdy = OnGpuAsAt(dy, st.y, offset), ref_dx = Poisoned(s, Device::kCUDA);
        Tensor gdx = PoisonedAsAt(s, st.x, offset);
        Gpu().ReluBackward(Widened(gy), Widened(gdy), ref_dx);
        Gpu().ReluBackward(gy, gdy, gdx);
        EXPECT_TRUE(BitwiseEqual(gdx.ToHost(), StoredAs(ref_dx.ToHost(), st.x)))
            << what << ": backward";
        // A mask read as float y: x as the mask, st.x for both y and dy.
        Tensor gdy2 = OnGpuAsAt(dy, st.x, offset), gdx2 = PoisonedAsAt(s, st.y, offset);
        Tensor ref_dx2 = Poisoned(s, Device::kCUDA);
        Gpu().ReluBackward(Widened(gx), Widened(gdy2), ref_dx2);
        Gpu().ReluBackward(gx, gdy2, gdx2);
        EXPECT_TRUE(BitwiseEqual(gdx2.ToHost(), StoredAs(ref_dx2.ToHost(), st.y)))
            << what << ": backward, x as the mask";
      }
    }
    for (const int64_t offset : {0, 1}) {  // in place, bf16
      Tensor gx = OnGpuAsAt(x, DType::kBF16, offset), ref = Poisoned(s, Device::kCUDA);
      Gpu().ReluForward(Widened(gx), ref);
      Gpu().ReluForward(gx, gx);
      EXPECT_TRUE(BitwiseEqual(gx.ToHost(), StoredAs(ref.ToHost(), DType::kBF16)))
          << s.ToString() << " in place, offset " << offset;
      Tensor gdy = OnGpuAsAt(dy, DType::kBF16, offset), ref_dx = Poisoned(s, Device::kCUDA);
      Gpu().ReluBackward(Widened(gx), Widened(gdy), ref_dx);
      Gpu().ReluBackward(gx, gdy, gdy);
      EXPECT_TRUE(BitwiseEqual(gdy.ToHost(), StoredAs(ref_dx.ToHost(), DType::kBF16)))
          << s.ToString() << " backward in place, offset " << offset;
    }
  }
}

// ReluBackwardTwice (a residual sum's two input gradients in one pass) against ReluBackward
// into each, bitwise: bf16 and float, aligned and one element off (the quads and the element
// path), each output aliasing dy in turn.
TEST_F(CudaTest, ReluBackwardTwiceAsTwoPasses) {
  for (const Shape& s : {Shape{7, 5, 5, 33}, Shape{3, 2, 2, 8}}) {
    const Tensor x = RandomCpu(s, 161), dy = RandomCpu(s, 162);
    for (const DType t : kTypes) {
      for (const int64_t offset : {0, 1}) {
        for (const int alias : {-1, 0, 1}) {
          const std::string what = absl::StrFormat("%s, offset %d, %s, alias %d", s.ToString(),
                                                   offset, DTypeName(t), alias);
          Tensor gy = OnGpuAsAt(x, t, offset);
          Gpu().ReluForward(gy, gy);
          Tensor ref = PoisonedAsAt(s, t, offset);
          Gpu().ReluBackward(gy, OnGpuAsAt(dy, t, offset), ref);
          Tensor gdy = OnGpuAsAt(dy, t, offset);
          Tensor d0 = alias == 0 ? gdy : PoisonedAsAt(s, t, offset);
          Tensor d1 = alias == 1 ? gdy : PoisonedAsAt(s, t, offset);
          Gpu().ReluBackwardTwice(gy, gdy, d0, d1);
          EXPECT_TRUE(BitwiseEqual(d0.ToHost(), ref.ToHost())) << what << ": dx0";
          EXPECT_TRUE(BitwiseEqual(d1.ToHost(), ref.ToHost())) << what << ": dx1";
        }
      }
    }
  }
}

// Concat forward and backward: parts and whole in each storage pair (x: the parts, y: the
// whole) and both bf16; channel offsets put bf16 blocks at odd 2-byte offsets.
TEST_F(CudaTest, CopyChannelsBf16Storage) {
  for (const auto& [h, w, n] : {std::tuple{5, 5, 7}, std::tuple{3, 3, 8}, std::tuple{3, 1, 1}}) {
    const Shape as{3, h, w, n}, bs{5, h, w, n}, ws{8, h, w, n};
    const Tensor a = RandomCpu(as, 161), b = RandomCpu(bs, 162);
    StoragePair pairs[4] = {
        kStoragePairs[0], kStoragePairs[1], kStoragePairs[2], {DType::kFloat32, DType::kFloat32}};
    for (const StoragePair& st : pairs) {
      const std::string what = absl::StrFormat("whole %s, parts %s, whole %s", ws.ToString(),
                                               DTypeName(st.x), DTypeName(st.y));
      Tensor ga = OnGpuAs(a, st.x), gb = OnGpuAs(b, st.x);
      Tensor ref = Poisoned(ws, Device::kCUDA), gw = PoisonedAs(ws, st.y);
      Gpu().CopyChannelsIn(Widened(ga), 0, ref);
      Gpu().CopyChannelsIn(Widened(gb), 3, ref);
      Gpu().CopyChannelsIn(ga, 0, gw);
      Gpu().CopyChannelsIn(gb, 3, gw);
      EXPECT_TRUE(BitwiseEqual(gw.ToHost(), StoredAs(ref.ToHost(), st.y))) << what << ": in";
      // Out: from a whole of st.y (random values: rounding when st.x is bf16) into parts.
      Tensor gwhole = OnGpuAs(RandomCpu(ws, 163), st.y);
      for (const auto& [c0, ps] : {std::pair{int64_t{0}, as}, std::pair{int64_t{3}, bs}}) {
        Tensor ref_out = Poisoned(ps, Device::kCUDA), out = PoisonedAs(ps, st.x);
        Gpu().CopyChannelsOut(Widened(gwhole), c0, ref_out);
        Gpu().CopyChannelsOut(gwhole, c0, out);
        EXPECT_TRUE(BitwiseEqual(out.ToHost(), StoredAs(ref_out.ToHost(), st.x)))
            << what << ": out at " << c0;
      }
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
