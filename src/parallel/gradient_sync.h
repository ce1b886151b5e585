// GradientSync: sums each parameter shard's gradient over the data-parallel group, in
// buckets that start while backward is still running (the overlap of Horovod's tensor
// fusion and PyTorch DDP's buckets).
//
// At construction the learnable parameters are packed, in backward order (last layer
// first), into buckets of about `bucket_mb` megabytes, and every gradient is re-pointed
// into its bucket's flat buffer (Param::grad becomes a view), so launching a bucket is
// one in-place all-reduce with no copies. Pass AfterLayerHook() to Net::Backward: once
// the layer that completes a bucket has run, the bucket's all-reduce starts, and later
// layers' backward overlaps with it. Finish() starts any bucket not yet started and
// waits for all. Every rank of the group builds the same buckets from the same Net and
// starts them in the same order.
//
// The reduction is a SUM, not a mean: the loss gradient is already scaled by
// 1 / global batch (RunContext::loss_scale), so summing the replicas' gradients gives the
// gradient of the global batch's mean loss, exactly what one rank would compute on the
// whole batch.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/net.h"
#include "parallel/communicator.h"

namespace colonnade {

class GradientSync {
 public:
  struct BucketInfo {
    std::vector<std::string> params;  // "fc8/bias", "fc8/weight", ...
    int64_t elements = 0;             // gradient elements (without alignment padding)
    int ready_layer = 0;              // the bucket is complete after this layer's backward
  };
  struct Stats {
    int64_t steps = 0;
    int64_t bytes_per_step = 0;    // gradient bytes all-reduced per step (payload)
    double last_wait_seconds = 0;  // time Finish() blocked in the last step
    double total_wait_seconds = 0;
    int launched_in_backward = 0;  // buckets started by the hook in the last step
  };

  // `net` must be built (parameters allocated); it and `dp_comm` must outlive this. A
  // null `dp_comm` or a group of one makes every call a no-op (no buckets, no views).
  // bucket_mb must be positive; a parameter larger than a bucket gets its own.
  static absl::StatusOr<std::unique_ptr<GradientSync>> Create(Net& net, Communicator* dp_comm,
                                                              double bucket_mb);
  // The buckets Create makes for a built `net` (the cost model uses them too).
  static absl::StatusOr<std::vector<BucketInfo>> PlanBuckets(const Net& net, double bucket_mb);

  // For Net::Backward(ctx, hook).
  std::function<void(int)> AfterLayerHook();
  // Starts the remaining buckets, waits for all, and readies the next step. Returns the
  // first communication error of the step.
  absl::Status Finish();

  bool enabled() const { return comm_ != nullptr; }
  const std::vector<BucketInfo>& buckets() const { return info_; }
  const Stats& stats() const { return stats_; }

 private:
  GradientSync(Net& net, Communicator* comm) : net_(net), comm_(comm) {}
  void OnLayer(int layer);
  void Launch(size_t b);

  struct Bucket {
    Tensor buffer;                                 // {padded elements, 1, 1, 1}
    std::vector<std::pair<Param*, float*>> views;  // each param and where its grad must live
    CommHandle handle;
  };
  Net& net_;
  Communicator* comm_;
  std::vector<Bucket> buckets_;
  std::vector<BucketInfo> info_;
  size_t next_ = 0;  // first bucket not yet started this step
  int launched_in_backward_ = 0;
  absl::Status error_;
  Stats stats_;
};

}  // namespace colonnade
