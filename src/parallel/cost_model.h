// A step-time model for a (nodes x GPUs per node) cluster and a (dp, mp) layout, from a
// measured single-GPU compute time and stated link bandwidths (docs/PARALLELISM.md).
//
// The model takes the real shard the column split builds for the layout (its layers,
// their FLOPs, the channels each communication layer moves, the parameter buckets in
// backward order) and replays one step:
//   * compute: the measured time t_c of forward + backward for `per_gpu_batch` images on
//     one GPU, spread over layers in proportion to their FLOPs (conv and fc; the
//     memory-bound layers are folded into them), forward (1 - bwd_fraction) of it;
//   * mp collectives block the layer that needs them, over NVLink:
//       all-gather / reduce-scatter  alpha_intra + (mp-1)/mp * bytes / B_nvlink
//   * dp all-reduce of each gradient bucket, hierarchical (NCCL's intra-node
//     reduce-scatter / inter-node all-reduce / intra-node all-gather), started when the
//     bucket's last layer finishes backward, buckets one after another on their stream:
//       T(S) = [d>1] (alpha_intra + 2(d-1)/d * S / B_nvlink)
//            + [N>1] (2 log2(N) alpha_inter + 2(N-1)/N * (S/d) / B_ib)
//     with d = dp ranks per node (GPUs per node / mp) and N nodes; each GPU has its own
//     InfiniBand port (rail-optimised fabric), so S/d crosses each port;
//     A started all-reduce progresses at the full rate once backward is done, and at
//     `overlap` times that rate while backward still computes (1: a progress engine of
//     its own, as NCCL's kernels; Open MPI without a progress thread moves data only inside
//     MPI calls, which the gradient hook makes once per layer: fitted 0.08-0.22 over TCP,
//     experiments/multinode, docs/PARALLELISM.md section 8);
//   * the step ends when backward and the last bucket are both done.
// Weak scaling: every GPU keeps `per_gpu_batch` images of work (a replica of mp GPUs
// takes mp x per_gpu_batch images), so efficiency = t_c / predicted step time.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/models.h"

namespace colonnade {

struct ClusterModel {
  int gpus_per_node = 8;
  double nvlink_gbs = 360;     // achieved NCCL bus bandwidth inside a node, GB/s
  double ib_gbs = 45;          // achieved per-GPU InfiniBand bandwidth, GB/s
  double alpha_intra_us = 15;  // latency of one collective inside a node
  double alpha_inter_us = 6;   // latency per tree level between nodes
  // Rate at which an all-reduce progresses while backward computes, relative to its rate
  // after backward (see above); 1: fully concurrent.
  double overlap = 1;
};

struct ComputeModel {
  double compute_ms = 30;  // forward + backward of per_gpu_batch images on one GPU
  int64_t per_gpu_batch = 256;
  double bwd_fraction = 2.0 / 3;  // backward's share of compute_ms
  double bucket_mb = 25;
};

struct StepPrediction {
  int nodes = 1, dp = 1, mp = 1;
  int64_t global_batch = 0;
  double fwd_ms = 0, bwd_ms = 0;  // compute plus the blocking mp collectives
  double mp_comm_ms = 0;          // the mp collectives alone
  double dp_comm_ms = 0;          // all buckets' all-reduce time, if nothing overlapped
  double exposed_ms = 0;          // all-reduce time not hidden behind backward
  double step_ms = 0;
  double efficiency = 0;             // compute_ms / step_ms
  double efficiency_no_overlap = 0;  // if the all-reduce started after backward
  double mp_mb = 0, dp_mb = 0;       // megabytes each GPU sends per step (ring algorithms)
  int buckets = 0;
};

absl::StatusOr<StepPrediction> PredictStep(const std::string& model, const ModelOptions& options,
                                           int nodes, int mp, const ClusterModel& cluster,
                                           const ComputeModel& compute);

}  // namespace colonnade
