// Ops calls with inconsistent shapes or parameters that every backend must refuse, with the
// message the shared shape rule gives (core/op_shapes.cc, core/ops/<family>.cc). The same table
// runs against CpuOps (tests/core, op_shapes_test.cc) and the CUDA backend (tests/cuda, on the GPU
// and on the emulator), so the backends cannot drift apart again. Each case records what the
// backends did before the checks were shared.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace colonnade::testing {

struct BadOpsCall {
  std::string name;     // test name suffix
  std::string message;  // regular expression the death message must match
  std::function<void(Ops&, Device)> call;
};
// Test parameters print as their name (ctest lists them by it).
inline void PrintTo(const BadOpsCall& c, std::ostream* os) { *os << c.name; }

inline Tensor ZeroTensor(const Shape& s, Device d) {
  Tensor t(s, d);
  t.CopyFromHost(std::vector<float>(t.size(), 0.0f));
  return t;
}

inline PoolParams MaxPool(int size, int stride, int pad, bool ceil_mode) {
  PoolParams p;
  p.kind = PoolParams::kMax;
  p.size = size;
  p.stride = stride;
  p.pad = pad;
  p.ceil_mode = ceil_mode;
  return p;
}

inline std::vector<BadOpsCall> BadOpsCalls() {
  using T = Tensor;
  std::vector<BadOpsCall> v;
  // 8x8, 3x3/2: ceil mode gives 4x4, floor mode 3x3 (PoolLayer::Setup). Before: the CPU took
  // either size in either mode (it only asked that every window start in the image).
  v.push_back({"PoolFloorSizeInCeilMode", "expected 4x4", [](Ops& ops, Device d) {
                 T x = ZeroTensor(Shape{2, 8, 8, 3}, d), y = ZeroTensor(Shape{2, 3, 3, 3}, d);
                 ops.PoolForward(x, y, MaxPool(3, 2, 0, true));
               }});
  v.push_back({"PoolCeilSizeInFloorMode", "expected 3x3", [](Ops& ops, Device d) {
                 T x = ZeroTensor(Shape{2, 8, 8, 3}, d), y = ZeroTensor(Shape{2, 4, 4, 3}, d);
                 ops.PoolForward(x, y, MaxPool(3, 2, 0, false));
               }});
  // Padding as large as the window: the first window lies in the padding only. Before: the
  // GPU did not check the parameters.
  v.push_back({"PoolPadNotBelowSize", "pool size 2 stride 2 pad 2", [](Ops& ops, Device d) {
                 T x = ZeroTensor(Shape{1, 5, 5, 2}, d), y = ZeroTensor(Shape{1, 4, 4, 2}, d);
                 ops.PoolForward(x, y, MaxPool(2, 2, 2, true));
               }});
  // Before: the GPU's backward pass checked only that dy and dx match y and x in size.
  v.push_back({"PoolBackwardWrongOutputShape", "expected 3x3", [](Ops& ops, Device d) {
                 T x = ZeroTensor(Shape{2, 8, 8, 3}, d), y = ZeroTensor(Shape{2, 4, 4, 3}, d);
                 T dy = ZeroTensor(Shape{2, 4, 4, 3}, d), dx = ZeroTensor(Shape{2, 8, 8, 3}, d);
                 ops.PoolBackward(x, y, dy, dx, MaxPool(3, 2, 0, false));
               }});
  // Before: the GPU computed the output size with a division by the stride (SIGFPE).
  v.push_back({"ConvStrideZero", "conv stride", [](Ops& ops, Device d) {
                 T x = ZeroTensor(Shape{2, 5, 5, 4}, d), w = ZeroTensor(Shape{3, 2, 3, 3}, d);
                 T y = ZeroTensor(Shape{3, 3, 3, 4}, d);
                 ConvParams p;
                 p.kernel_h = p.kernel_w = 3;
                 p.stride = 0;
                 ops.ConvForward(x, w, y, p);
               }});
  // Before: the GPU read H, W and N of tensors that have no such dimensions.
  v.push_back({"CopyChannelsNotCHWN", "must be CHWN", [](Ops& ops, Device d) {
                 T x = ZeroTensor(Shape{2, 12}, d), y = ZeroTensor(Shape{5, 12}, d);
                 ops.CopyChannelsIn(x, 1, y);
               }});
  // y must be C x 1 x 1 x N (ops.h). Before: the CPU took any y of C*N elements.
  v.push_back({"GlobalAvgPoolTransposedOutput", "expected 3x1x1x5", [](Ops& ops, Device d) {
                 T x = ZeroTensor(Shape{3, 4, 4, 5}, d), y = ZeroTensor(Shape{5, 1, 1, 3}, d);
                 ops.GlobalAvgPoolForward(x, y);
               }});
  // Before: the GPU did not check the window size (alpha / 0) ...
  v.push_back({"LrnCrossSizeZero", "size 0", [](Ops& ops, Device d) {
                 T x = ZeroTensor(Shape{4, 3, 3, 2}, d), y = ZeroTensor(Shape{4, 3, 3, 2}, d);
                 T denom = ZeroTensor(Shape{4, 3, 3, 2}, d);
                 LrnCrossParams p;
                 p.size = 0;
                 p.alpha_over_size = true;
                 ops.LrnCrossForward(x, y, denom, p);
               }});
  // ... nor, in the backward pass, any tensor but dx (a short dy was read past its end).
  v.push_back({"LrnCrossBackwardShortDy", "LrnCrossBackward", [](Ops& ops, Device d) {
                 const Shape s{4, 3, 3, 2};
                 T x = ZeroTensor(s, d), y = ZeroTensor(s, d), denom = ZeroTensor(s, d);
                 T dy = ZeroTensor(Shape{4, 3, 3, 1}, d), dx = ZeroTensor(s, d);
                 ops.LrnCrossBackward(x, y, denom, dy, dx, LrnCrossParams{});
               }});
  v.push_back({"LrnWithinBackwardShortDenom", "LrnWithinBackward", [](Ops& ops, Device d) {
                 const Shape s{2, 5, 5, 2};
                 T x = ZeroTensor(s, d), y = ZeroTensor(s, d), dy = ZeroTensor(s, d);
                 T denom = ZeroTensor(Shape{2, 5, 5, 1}, d), dx = ZeroTensor(s, d);
                 ops.LrnWithinBackward(x, y, denom, dy, dx, LrnWithinParams{});
               }});
  // Before: the GPU checked gamma only.
  v.push_back({"BatchNormShortRunningVar", "per-channel tensor", [](Ops& ops, Device d) {
                 const Shape s{3, 2, 2, 4}, c{3}, c2{2};
                 T x = ZeroTensor(s, d), y = ZeroTensor(s, d), gamma = ZeroTensor(c, d);
                 T beta = ZeroTensor(c, d), rm = ZeroTensor(c, d), rv = ZeroTensor(c2, d);
                 T sm = ZeroTensor(c, d), si = ZeroTensor(c, d), sc = ZeroTensor(c, d);
                 ops.BatchNormForwardTrain(x, gamma, beta, y, rm, rv, sm, si, sc, BatchNormParams{},
                                           false);
               }});
  // New with BatchNormApply (the recomputation of the backward pass): checked from the start.
  v.push_back({"BatchNormApplyShortScale", "per-channel tensor", [](Ops& ops, Device d) {
                 const Shape s{3, 2, 2, 4}, c{3};
                 T x = ZeroTensor(s, d), y = ZeroTensor(s, d), mean = ZeroTensor(c, d);
                 T scale = ZeroTensor(Shape{2}, d), shift = ZeroTensor(c, d);
                 ops.BatchNormApply(x, mean, scale, shift, y, false);
               }});
  v.push_back({"BatchNormBackwardShortDbeta", "per-channel tensor", [](Ops& ops, Device d) {
                 const Shape s{3, 2, 2, 4}, c{3};
                 T x = ZeroTensor(s, d), dy = ZeroTensor(s, d), dx = ZeroTensor(s, d);
                 T gamma = ZeroTensor(c, d), sm = ZeroTensor(c, d), si = ZeroTensor(c, d);
                 T dgamma = ZeroTensor(c, d), dbeta = ZeroTensor(Shape{1}, d);
                 ops.BatchNormBackward(x, gamma, sm, si, nullptr, dy, dx, dgamma, dbeta);
               }});
  // Before: the GPU drew masks for images outside the global batch.
  v.push_back(
      {"DropoutImagesOutsideGlobalBatch", "outside the global batch", [](Ops& ops, Device d) {
         const Shape s{2, 2, 2, 4};
         T x = ZeroTensor(s, d), y = ZeroTensor(s, d), mask = ZeroTensor(s, d);
         DropoutParams p;
         p.global_batch = 6;
         p.image_offset = 4;
         ops.DropoutForward(x, y, mask, p);
       }});
  return v;
}

}  // namespace colonnade::testing
