// The CPU emulator's mbarriers and named barriers (src/cuda/emu/emu_runtime.h), through the
// same wrappers the warp-specialized wgmma kernels use (cuda/tc_port.h): a producer / consumer
// hand-off through cp.async arrive-on is exact; a consumer that skips its wait reads what the
// stage held before (the emulator defers the copies, so the missing wait shows); and a wait
// nothing completes, or a named barrier some threads never reach, stops the run with a message
// instead of hanging. Emulator only (cuda_emu_tests).

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

}  // namespace
}  // namespace colonnade::testing
