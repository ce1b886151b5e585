#include "apps/train_step.h"

namespace colonnade {

absl::Status TrainingStep::Enqueue(const StepScalars& values, double* comm_wait_s) {
  Net& net = *p_.net;
  Tensor& images = net.blob("data");
  Tensor& labels = net.blob("label");
  absl::Status status;
  // The device work; `dev` non-null while it is captured as a graph (the kernels then read
  // the step, the rate and the feed slot from the device block), whose phases cannot be
  // told apart on the timeline.
  auto enqueue = [&](const StepScalars* dev) {
    const bool phases = dev == nullptr && p_.timeline != nullptr;
    if (p_.feed != nullptr) {
      absl::Status s =
          p_.feed->Augment(&images, &labels, dev != nullptr ? &dev->feed_slot : nullptr);
      if (!s.ok() && status.ok()) status = s;
      if (phases) p_.timeline->Mark(StepPhase::kCopyIn);
    }
    RunContext ctx = p_.context(values.step);
    ctx.device_scalars = dev;
    net.Forward(ctx);
    if (phases) p_.timeline->Mark(StepPhase::kForward);
    if (p_.sync != nullptr) {
      net.Backward(ctx, p_.sync->AfterLayerHook());
    } else {
      net.Backward(ctx);
    }
    if (phases) p_.timeline->Mark(StepPhase::kBackward);
    if (p_.sync != nullptr) {
      if (absl::Status s = p_.sync->Finish(); !s.ok() && status.ok()) status = s;
      if (comm_wait_s != nullptr) *comm_wait_s += p_.sync->stats().last_wait_seconds;
    }
    if (phases) p_.timeline->Mark(StepPhase::kGradSync);
    p_.optimizer->Step(net, values.lr, dev != nullptr ? &dev->lr : nullptr);
    if (phases) p_.timeline->Mark(StepPhase::kOptimizer);
    net.ops().AccumulateResults(net.blob("probs"), labels, net.blob("loss"), values.step,
                                dev != nullptr ? &dev->step : nullptr, *p_.totals);
    if (phases) p_.timeline->Mark(StepPhase::kResults);
  };
  if (p_.graph != nullptr) {
    // A rebuilt net (evaluation with a short last batch) moves its buffers: Net::builds()
    // keys the graph, so a new one is warmed up and captured.
    if (p_.graph->Step(net.builds(), values, enqueue) != cuda::StepRun::kPlain &&
        p_.timeline != nullptr) {
      p_.timeline->Mark(StepPhase::kGraph);
    }
  } else {
    enqueue(nullptr);
  }
  return status;
}

}  // namespace colonnade
