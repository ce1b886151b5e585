#include "parallel/cost_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "parallel/comm_layers.h"
#include "parallel/gradient_sync.h"
#include "parallel/model_split.h"

namespace colonnade {
namespace {

// Gives the split its group size; the cost model never communicates.
class ShapeOnlyCommunicator : public Communicator {
 public:
  explicit ShapeOnlyCommunicator(int size) : Communicator(0, size) {}
  const char* backend() const override { return "shape-only"; }
  absl::StatusOr<CommHandle> StartAllReduceSum(Tensor&) override { return No(); }
  absl::StatusOr<CommHandle> StartAllGather(const Tensor&, Tensor&) override { return No(); }
  absl::StatusOr<CommHandle> StartReduceScatterSum(const Tensor&, Tensor&) override { return No(); }
  absl::StatusOr<CommHandle> StartBroadcast(Tensor&, int) override { return No(); }
  absl::Status Barrier() override { return No(); }

 private:
  static absl::Status No() {
    return absl::UnimplementedError("the cost model does not communicate");
  }
};

// Per image: forward FLOPs and the bytes of the full blobs the mp collectives move.
struct LayerCost {
  double flops = 0;
  Collectives::Kind fwd = Collectives::kNone, bwd = Collectives::kNone;
  double bytes = 0;
};

// Each layer states its cost: FLOPs (Layer::FlopsPerImage) and, for the communication
// layers, their collectives (CommLayer).
std::vector<LayerCost> Costs(Net& net) {
  std::vector<LayerCost> out;
  for (const LayerEntry& e : net.layers()) {
    LayerCost c;
    std::vector<Shape> x, y;
    for (const std::string& b : e.inputs) x.push_back(net.blob(b).shape());
    for (const std::string& b : e.outputs) y.push_back(net.blob(b).shape());
    c.flops = e.layer->FlopsPerImage(x, y);
    if (auto* comm = dynamic_cast<const CommLayer*>(e.layer.get())) {
      const Collectives k = comm->collectives();
      c.fwd = k.forward;
      c.bwd = k.backward;
      // The full blob: the gathered output of an all-gather, the input of a slice.
      const Shape& full = x[0].elements() >= y[0].elements() ? x[0] : y[0];
      c.bytes = 4.0 * full.elements() / full.n();
    }
    out.push_back(c);
  }
  return out;
}

// What the model needs from a shard: its layers' costs and its gradient buckets.
struct Built {
  std::vector<LayerCost> costs;
  std::vector<GradientSync::BucketInfo> buckets;
  double flops = 0;  // forward, per image, this rank
};

absl::StatusOr<Built> BuildForModel(const std::string& model, const ModelOptions& options, int mp,
                                    double bucket_mb) {
  // Building allocates the parameters (the buckets need their sizes), so results are
  // cached: a table of layouts and node counts reuses each shard.
  static std::mutex mu;
  static std::map<std::string, Built> cache;
  const std::string key =
      absl::StrFormat("%s/%d/%d/%d/%d/%d/%g", model, options.input_size, options.num_classes,
                      options.columns, options.input_channels, mp, bucket_mb);
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  ShapeOnlyCommunicator comm(mp);
  ASSIGN_OR_RETURN(std::unique_ptr<Net> full, BuildModel(model, options));
  ASSIGN_OR_RETURN(ModelShard shard, SplitNet(std::move(full), mp, 0, mp > 1 ? &comm : nullptr));
  RETURN_IF_ERROR(shard.net->Build(1, Device::kCPU));
  Built b;
  b.costs = Costs(*shard.net);
  for (const LayerCost& c : b.costs) b.flops += c.flops;
  ASSIGN_OR_RETURN(b.buckets, GradientSync::PlanBuckets(*shard.net, bucket_mb));
  cache[key] = b;
  return b;
}

}  // namespace

absl::StatusOr<StepPrediction> PredictStep(const std::string& model, const ModelOptions& options,
                                           int nodes, int mp, const ClusterModel& cl,
                                           const ComputeModel& cm) {
  if (nodes < 1 || mp < 1 || cl.gpus_per_node % mp != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cost model: %d node(s), mp %d: mp must divide the %d GPUs of a node",
                        nodes, mp, cl.gpus_per_node));
  }
  ASSIGN_OR_RETURN(const Built one, BuildForModel(model, options, 1, cm.bucket_mb));
  const double flops_ref = one.flops * cm.per_gpu_batch;  // one GPU's forward work
  ASSIGN_OR_RETURN(const Built built, BuildForModel(model, options, mp, cm.bucket_mb));

  const int d = cl.gpus_per_node / mp;  // dp ranks per node
  StepPrediction p;
  p.nodes = nodes;
  p.mp = mp;
  p.dp = d * nodes;
  p.global_batch = cm.per_gpu_batch * cl.gpus_per_node * nodes;
  const double replica = static_cast<double>(cm.per_gpu_batch) * mp;
  const double ms_per_flop_fwd = cm.compute_ms * (1 - cm.bwd_fraction) / flops_ref;
  const double ms_per_flop_bwd = cm.compute_ms * cm.bwd_fraction / flops_ref;
  const double nvl = cl.nvlink_gbs * 1e6, ib = cl.ib_gbs * 1e6;  // bytes per ms
  auto mp_time = [&](Collectives::Kind kind, double bytes, double* wire) {
    if (kind == Collectives::kNone || mp == 1) return 0.0;
    double share = (mp - 1.0) / mp * bytes * (kind == Collectives::kAllReduce ? 2 : 1);
    *wire += share;
    return cl.alpha_intra_us * 1e-3 + share / nvl;
  };
  auto allreduce_ms = [&](double bytes) {
    double t = 0;
    if (d > 1) t += cl.alpha_intra_us * 1e-3 + 2.0 * (d - 1) / d * bytes / nvl;
    if (nodes > 1) {
      t += 2 * std::log2(static_cast<double>(nodes)) * cl.alpha_inter_us * 1e-3 +
           2.0 * (nodes - 1) / nodes * (bytes / d) / ib;
    }
    return t;
  };

  double wire = 0, t = 0;
  for (const LayerCost& c : built.costs) {
    double comm_ms = mp_time(c.fwd, c.bytes * replica, &wire);
    p.mp_comm_ms += comm_ms;
    t += c.flops * replica * ms_per_flop_fwd + comm_ms;
  }
  p.fwd_ms = t;
  std::vector<double> done(built.costs.size(), 0);
  for (int i = static_cast<int>(built.costs.size()) - 1; i >= 0; --i) {
    const LayerCost& c = built.costs[i];
    double comm_ms = mp_time(c.bwd, c.bytes * replica, &wire);
    p.mp_comm_ms += comm_ms;
    t += c.flops * replica * ms_per_flop_bwd + comm_ms;
    done[i] = t;
  }
  p.bwd_ms = t - p.fwd_ms;
  p.mp_mb = wire / 1e6;
  double end = 0, grad_bytes = 0;
  // Buckets one after another, each from when its last layer is done; until backward ends
  // (at t) an all-reduce moves at `overlap` times its full rate.
  const double rate = std::clamp(cl.overlap, 0.0, 1.0);
  auto finish = [&](double start, double cost) {
    if (start >= t) return start + cost;
    const double during = rate * (t - start);  // work done before backward ends
    if (during >= cost) return start + cost / rate;
    return t + (cost - during);
  };
  if (p.dp > 1) {
    for (const GradientSync::BucketInfo& bucket : built.buckets) {
      const double bytes = 4.0 * bucket.elements;
      const double cost = allreduce_ms(bytes);
      end = finish(std::max(end, done[bucket.ready_layer]), cost);
      p.dp_comm_ms += cost;
      grad_bytes += bytes;
    }
  }
  p.buckets = static_cast<int>(built.buckets.size());
  p.dp_mb = p.dp > 1 ? 2.0 * (p.dp - 1) / p.dp * grad_bytes / 1e6 : 0;
  p.exposed_ms = std::max(0.0, end - t);
  p.step_ms = t + p.exposed_ms;
  p.efficiency = cm.compute_ms / p.step_ms;
  p.efficiency_no_overlap = cm.compute_ms / (t + p.dp_comm_ms);
  return p;
}

}  // namespace colonnade
