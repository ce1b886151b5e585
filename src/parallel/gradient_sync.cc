#include "parallel/gradient_sync.h"

#include <chrono>
#include <map>

#include "absl/strings/str_format.h"
#include "core/log.h"
#include "core/ops.h"
#include "parallel/watchdog.h"

namespace colonnade {
namespace {

// Gradient views start on 256-byte boundaries, which vectorised device kernels expect of
// a tensor's base address.
constexpr int64_t kAlignFloats = 64;
int64_t AlignUp(int64_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

}  // namespace

absl::StatusOr<std::vector<GradientSync::BucketInfo>> GradientSync::PlanBuckets(const Net& net,
                                                                                double bucket_mb) {
  if (!(bucket_mb > 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--bucket_mb=%g must be positive", bucket_mb));
  }
  const int64_t cap = static_cast<int64_t>(bucket_mb * 1024 * 1024 / sizeof(float));
  std::vector<BucketInfo> plan;
  BucketInfo current;
  auto close = [&]() {
    if (current.params.empty()) return;
    plan.push_back(std::move(current));
    current = BucketInfo();
  };
  // Backward order: last layer first.
  const std::vector<LayerEntry>& layers = net.layers();
  for (int i = static_cast<int>(layers.size()) - 1; i >= 0; --i) {
    std::vector<Param*> ps = layers[i].layer->params();
    for (auto it = ps.rbegin(); it != ps.rend(); ++it) {
      const Param* p = *it;
      if (!p->learnable) continue;
      if (p->value.empty()) {
        return absl::FailedPreconditionError("GradientSync: the Net is not built (parameter " +
                                             layers[i].layer->name() + "/" + p->name +
                                             " has no storage)");
      }
      current.params.push_back(layers[i].layer->name() + "/" + p->name);
      current.elements += p->value.size();
      current.ready_layer = i;
      if (current.elements >= cap) close();
    }
  }
  close();
  return plan;
}

absl::StatusOr<std::unique_ptr<GradientSync>> GradientSync::Create(Net& net, Communicator* dp_comm,
                                                                   double bucket_mb) {
  absl::StatusOr<std::vector<BucketInfo>> plan = PlanBuckets(net, bucket_mb);
  if (!plan.ok()) return plan.status();
  std::unique_ptr<GradientSync> sync(
      new GradientSync(net, dp_comm != nullptr && dp_comm->size() > 1 ? dp_comm : nullptr));
  if (!sync->comm_) return sync;
  std::map<std::string, Param*> by_name;
  for (const NamedParam& np : net.params()) by_name[np.name] = np.param;

  // Allocate each bucket and re-point the gradients into it.
  for (BucketInfo& info : *plan) {
    int64_t padded = 0;
    for (const std::string& name : info.params) padded += AlignUp(by_name.at(name)->value.size());
    Bucket bucket;
    bucket.buffer = Tensor(Shape{padded, 1, 1, 1}, net.device());
    bucket.buffer.Fill(0.0f);
    int64_t off = 0;
    for (const std::string& name : info.params) {
      Param& p = *by_name.at(name);
      Tensor view = bucket.buffer.Channels(off, p.value.size()).Reshaped(p.value.shape());
      if (!p.grad.empty() && p.grad.size() == view.size()) view.CopyFrom(p.grad);
      p.grad = view;
      bucket.views.emplace_back(&p, view.data());
      off += AlignUp(p.value.size());
    }
    sync->stats_.bytes_per_step += info.elements * static_cast<int64_t>(sizeof(float));
    sync->buckets_.push_back(std::move(bucket));
    sync->info_.push_back(std::move(info));
  }
  return sync;
}

std::function<void(int)> GradientSync::AfterLayerHook() {
  if (!comm_) return nullptr;
  return [this](int layer) { OnLayer(layer); };
}

void GradientSync::Launch(size_t b) {
  Bucket& bucket = buckets_[b];
  for (const auto& [p, where] : bucket.views) {
    CHECK(p->grad.data() == where)
        << "a gradient was re-allocated after GradientSync re-pointed it into its bucket";
  }
  absl::StatusOr<CommHandle> h = comm_->StartAllReduceSum(bucket.buffer);
  if (!h.ok()) {
    if (error_.ok()) error_ = h.status();
    return;
  }
  bucket.handle = std::move(*h);
}

void GradientSync::OnLayer(int layer) {
  while (next_ < buckets_.size() && info_[next_].ready_layer >= layer) {
    Launch(next_++);
    ++launched_in_backward_;
  }
  // Give outstanding operations a chance to progress (MPI progresses only inside calls).
  for (size_t b = 0; b < next_; ++b) {
    if (buckets_[b].handle) buckets_[b].handle->Test();
  }
}

absl::Status GradientSync::Finish() {
  if (!comm_) {
    stats_.steps++;
    return absl::OkStatus();
  }
  WatchdogLabel label("gradient all-reduce");
  auto t0 = std::chrono::steady_clock::now();
  while (next_ < buckets_.size()) Launch(next_++);
  for (Bucket& b : buckets_) {
    if (!b.handle) continue;
    absl::Status s = b.handle->Wait();
    if (!s.ok() && error_.ok()) error_ = s;
    b.handle.reset();
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats_.steps++;
  stats_.last_wait_seconds = waited;
  stats_.total_wait_seconds += waited;
  stats_.launched_in_backward = launched_in_backward_;
  launched_in_backward_ = 0;
  next_ = 0;
  absl::Status s = error_;
  error_ = absl::OkStatus();
  return s;
}

}  // namespace colonnade
