// The CPU emulator's mbarriers and named barriers (src/cuda/emu/emu_runtime.h), through the
// same wrappers the warp-specialized wgmma kernels use (cuda/tc_port.h): a producer / consumer
// hand-off through cp.async arrive-on is exact; a consumer that skips its wait reads what the
// stage held before (the emulator defers the copies, so the missing wait shows); and a wait
// nothing completes, or a named barrier some threads never reach, stops the run with a message
// instead of hanging. TMA: boxes land swizzled with zeros outside the tensor, late unless
// waited for, and bytes beyond those announced abort. Emulator only (cuda_emu_tests).

#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda/port.h"
#include "cuda/tc_port.h"
#include "gtest/gtest.h"

namespace colonnade::testing {
namespace {

namespace tc = cuda::tc;

constexpr int kProducers = 32, kConsumers = 64, kStages = 2, kRounds = 5;
constexpr int kWords = 4 * kProducers;  // one 16-byte chunk per producer thread and round

// A block of kProducers + kConsumers threads passing kRounds slices of kWords floats through
// kStages shared-memory stages: the producers copy slice r with cp.async into stage r % kStages
// and arrive on its full barrier (cp.async arrive-on), after waiting for the consumers to
// release the stage's previous slice; the consumers wait for the slice (unless skip_wait),
// copy it out and release the stage.
std::vector<float> HandOff(int rounds, bool skip_wait) {
  std::vector<float> in(size_t(rounds) * kWords), out(in.size(), -1.0f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  constexpr size_t kStageBytes = kWords * sizeof(float);
  emu::SetDynamicSharedBytes(kStages * kStageBytes + 2 * kStages * sizeof(uint64_t));
  emu::Launch(dim3(1), dim3(kProducers + kConsumers), [&] {
    unsigned char* smem = emu::DynamicShared();
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);
    uint64_t* empty = full + kStages;
    const int tid = static_cast<int>(threadIdx.x);
    if (tid == 0)
      for (int s = 0; s < kStages; ++s) {
        tc::MbarInit(full + s, kProducers);
        tc::MbarInit(empty + s, kConsumers);
      }
    __syncthreads();
    for (int r = 0; r < rounds; ++r) {
      const int s = r % kStages;
      float* stage = reinterpret_cast<float*>(smem + s * kStageBytes);
      if (tid < kProducers) {
        if (r >= kStages) tc::MbarWait(empty + s, (r / kStages - 1) & 1);
        cuda::CpAsync16(stage + 4 * tid, in.data() + size_t(r) * kWords + 4 * tid, true);
        tc::CpAsyncMbarArrive(full + s);
      } else {
        if (!skip_wait) tc::MbarWait(full + s, (r / kStages) & 1);
        const int c = tid - kProducers;
        for (int i = c; i < kWords; i += kConsumers) out[size_t(r) * kWords + i] = stage[i];
        tc::MbarArrive(empty + s);
      }
    }
    // (No cp.async.wait_group at the end: it would land the producers' copies before the
    // consumers of AMissingWaitReadsTheStageAsItWas run. Copies never waited for land at the
    // block's end.)
  });
  return out;
}

TEST(EmuSyncTest, ProducerConsumerHandOffIsExact) {
  std::vector<float> want(size_t(kRounds) * kWords);
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<float>(i);
  for (int order = 0; order < 3; ++order) {
    emu::SetScheduleOrder(order);
    EXPECT_EQ(HandOff(kRounds, false), want) << "schedule order " << order;
  }
  emu::SetScheduleOrder(2);
}

// One round (more would have the consumers release stages they never waited for, and the
// producers wait for phases that never come: a deadlock, which the emulator also reports), in
// forward order: every producer has issued its copies and arrived before any consumer runs,
// so only the emulator's deferred arrivals leave something for the missing wait to miss.
TEST(EmuSyncTest, AMissingWaitReadsTheStageAsItWas) {
  emu::SetScheduleOrder(0);
  const std::vector<float> out = HandOff(1, true);
  emu::SetScheduleOrder(2);
  int stale = 0;
  for (size_t i = 0; i < out.size(); ++i) stale += out[i] != static_cast<float>(i);
  EXPECT_GT(stale, 0) << "every copy had landed before a consumer that never waited read it";
}

TEST(EmuSyncDeathTest, AWaitNothingCompletesIsADeadlock) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        emu::SetDynamicSharedBytes(sizeof(uint64_t));
        emu::Launch(dim3(1), dim3(64), [] {
          uint64_t* bar = reinterpret_cast<uint64_t*>(emu::DynamicShared());
          if (threadIdx.x == 0) tc::MbarInit(bar, 65);  // one arrival more than there are threads
          __syncthreads();
          tc::MbarArrive(bar);
          tc::MbarWait(bar, 0);
        });
      },
      "deadlock");
}

TEST(EmuSyncDeathTest, ANamedBarrierSomeThreadsNeverReach) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(emu::Launch(dim3(1), dim3(96),
                           [] {
                             if (threadIdx.x < 64) tc::NamedBarrierSync<1, 96>();
                           }),
               "bar.sync 1, 96");
}

TEST(EmuSyncDeathTest, AWaitOnABarrierNeverInitialised) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        emu::SetDynamicSharedBytes(sizeof(uint64_t));
        emu::Launch(dim3(1), dim3(32),
                    [] { tc::MbarWait(reinterpret_cast<uint64_t*>(emu::DynamicShared()), 0); });
      },
      "never initialised");
}

// TMA (cp.async.bulk.tensor.3d with the 128-byte swizzle, as the wgmma_tma_* kernels issue
// it): a tensor of 3 x 5 x 70 16-bit values read in boxes of 8 rows x 64 columns from
// (c0, c1, c2), one box per 1 KiB-aligned slot, thread 0 announcing the bytes on one
// mbarrier; the others read after waiting (unless skip_wait). Returns the slots as landed.
constexpr int kTmaCols = 70, kTmaRows = 5, kTmaPlanes = 3, kBoxes = 8;
constexpr uint32_t kBoxBytes = 8 * 128;
uint16_t TmaValue(int x, int y, int z) { return uint16_t(1 + x + 100 * y + 1000 * z); }
std::vector<uint16_t> TmaBoxes(const int (&c)[kBoxes][3], unsigned announced, bool skip_wait) {
  std::vector<uint16_t> tensor(size_t(kTmaPlanes) * kTmaRows * kTmaCols);
  for (int z = 0; z < kTmaPlanes; ++z)
    for (int y = 0; y < kTmaRows; ++y)
      for (int x = 0; x < kTmaCols; ++x)
        tensor[(size_t(z) * kTmaRows + y) * kTmaCols + x] = TmaValue(x, y, z);
  tc::TmaMap map{};
  map.base = tensor.data();
  map.rank = 3;
  map.dim[0] = kTmaCols;
  map.dim[1] = kTmaRows;
  map.dim[2] = kTmaPlanes;
  map.stride[0] = kTmaCols * 2;
  map.stride[1] = kTmaRows * kTmaCols * 2;
  map.box[0] = 64;
  map.box[1] = 8;
  map.box[2] = 1;
  map.elem_bytes = 2;
  map.swizzle128 = true;
  std::vector<uint16_t> out(size_t(kBoxes) * kBoxBytes / 2);
  emu::SetDynamicSharedBytes(kBoxes * kBoxBytes + 1024 + sizeof(uint64_t));
  emu::Launch(dim3(1), dim3(64), [&] {
    unsigned char* base = emu::DynamicShared();
    unsigned char* slots = base + ((1024u - (tc::SmemAddress(base) & 1023u)) & 1023u);
    uint64_t* bar = reinterpret_cast<uint64_t*>(slots + kBoxes * kBoxBytes);
    if (threadIdx.x == 0) {
      std::memset(slots, 0xAB, kBoxes * kBoxBytes);  // not zero: the zero fill must show
      tc::MbarInit(bar, 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      tc::MbarArriveExpectTx(bar, announced);
      for (int b = 0; b < kBoxes; ++b)
        tc::TmaLoad3D(slots + b * kBoxBytes, &map, c[b][0], c[b][1], c[b][2], bar);
    } else if (threadIdx.x == 32) {  // one reader (the others only keep the block company)
      if (!skip_wait) tc::MbarWait(bar, 0);
      std::memcpy(out.data(), slots, out.size() * 2);
    }
  });
  return out;
}
// The box's element (x, y) by the wgmma layout's rule (WgOffsetA): chunk x / 8 of the
// 128-byte line y sits at chunk (x / 8) ^ (y % 8); zero outside the tensor.
TEST(EmuTmaTest, BoxesLandSwizzledWithZerosOutsideTheTensor) {
  const int c[kBoxes][3] = {{0, 0, 0},  {32, 0, 1}, {6, 2, 2},  {-8, -3, 0},
                            {64, 4, 1}, {0, 0, 3},  {60, 1, 2}, {0, 0, 0}};
  const std::vector<uint16_t> got = TmaBoxes(c, kBoxes * kBoxBytes, false);
  int wrong = 0;
  for (int b = 0; b < kBoxes; ++b)
    for (int y = 0; y < 8; ++y)
      for (int x = 0; x < 64; ++x) {
        const int gx = c[b][0] + x, gy = c[b][1] + y, gz = c[b][2];
        const bool in =
            gx >= 0 && gx < kTmaCols && gy >= 0 && gy < kTmaRows && gz >= 0 && gz < kTmaPlanes;
        const uint16_t want = in ? TmaValue(gx, gy, gz) : 0;
        const size_t at = size_t(b) * kBoxBytes / 2 + y * 64 + (((x / 8) ^ (y % 8)) * 8) + x % 8;
        if (got[at] != want && ++wrong <= 5)
          ADD_FAILURE() << "box " << b << " (" << x << ", " << y << "): " << got[at] << ", want "
                        << want;
      }
  EXPECT_EQ(wrong, 0);
}

// A reader that skips the barrier's wait reads slots some of whose boxes have not landed
// (the emulator lands each box at a random later moment).
TEST(EmuTmaTest, AMissingWaitReadsTheSlotsAsTheyWere) {
  int c[kBoxes][3];
  for (int b = 0; b < kBoxes; ++b) c[b][0] = c[b][1] = c[b][2] = 0;
  emu::SetScheduleOrder(0);
  const std::vector<uint16_t> got = TmaBoxes(c, kBoxes * kBoxBytes, true);
  emu::SetScheduleOrder(2);
  int stale = 0;
  for (uint16_t v : got) stale += v == 0xABAB;
  EXPECT_GT(stale, 0) << "every box had landed before a reader that never waited read it";
}

// More bytes landing on a barrier than expect_tx announced: an error, not a phase that
// completes early.
TEST(EmuTmaDeathTest, BytesBeyondTheAnnouncedOnesAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  int c[kBoxes][3];
  for (int b = 0; b < kBoxes; ++b) c[b][0] = c[b][1] = c[b][2] = 0;
  EXPECT_DEATH(TmaBoxes(c, (kBoxes - 1) * kBoxBytes, false), "more transaction bytes");
}

}  // namespace
}  // namespace colonnade::testing
