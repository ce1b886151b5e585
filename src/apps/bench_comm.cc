// bench_comm: what the parallel layer communicates per training step, and how much of
// the data-parallel gradient all-reduce hides behind backward, for every (dp, mp) layout
// of a model that the world size allows.
//
//   mpirun -np 8 bench_comm --model=alexnet --batch_size=256 --device=cuda
//   mpirun -np 2 bench_comm --model=alexnet --input_size=67 --batch_size=8 --device=cpu
//
// Per layout and rank, the slowest rank's median over --steps of:
//   fwd        forward (including the mp all-gathers)
//   bwd        backward alone, no data-parallel sync (mp reduce-scatters included)
//   sync       the bucketed all-reduce started after backward and waited for
//   overlap    backward with the buckets started by Net::Backward's after-layer hook,
//              plus the wait for the last ones
//   hidden     (bwd + sync - overlap) / sync: the fraction of the all-reduce that ran
//              behind backward (1 = fully hidden, 0 = none)
// and the bytes each rank puts on the wire per step (ring algorithms): mp collectives of
// forward and backward, dp gradient all-reduce. docs/PARALLELISM.md explains the cost
// model these numbers feed.
//
// With --predict it runs no step and needs no MPI: it prints the cost model's step time
// and weak-scaling efficiency for --nodes x --gpus_per_node GPUs and every layout, from
// the measured single-GPU --compute_ms and the stated link bandwidths:
//
//   bench_comm --predict --model=alexnet --compute_ms=30 --per_gpu_batch=256 --nodes=1,8,64
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "apps/cli.h"
#include "apps/output_file.h"
#include "core/backend.h"
#include "core/cpu_ops.h"
#include "core/log.h"
#include "core/models.h"
#include "core/philox.h"
#include "core/status_macros.h"
#include "cuda/cuda_backend.h"
#include "parallel/communicator.h"
#include "parallel/cost_model.h"
#include "parallel/gradient_sync.h"
#include "parallel/mesh.h"
#include "parallel/model_split.h"

ABSL_FLAG(std::string, model, "alexnet", "model of the zoo");
ABSL_FLAG(int, input_size, 0, "input side (0: the model's default)");
ABSL_FLAG(int, num_classes, 0, "classes (0: the model's default)");
ABSL_FLAG(int, columns, 0, "columns (0: the model's default)");
ABSL_FLAG(int64_t, batch_size, 128, "global batch");
ABSL_FLAG(std::string, layouts, "all",
          "comma-separated dpxmp layouts (e.g. 2x1,1x2), or 'all' that the world size, the "
          "columns and the batch allow with each mp group on one node");
ABSL_FLAG(int, steps, 5, "measured steps per layout");
ABSL_FLAG(int, warmup, 1, "unmeasured steps per layout");
ABSL_FLAG(std::string, device, "cpu", "cpu or cuda");
ABSL_FLAG(std::string, comm, "auto", "auto, nccl or mpi");
ABSL_FLAG(double, bucket_mb, 25.0, "gradient bucket size in MB");
ABSL_FLAG(int, cpu_threads, 0, "CPU ops threads per rank (0: COLONNADE_CPU_THREADS or cores)");
ABSL_FLAG(uint64_t, seed, 1, "seed");
ABSL_FLAG(std::string, csv, "", "also write the table as CSV here (rank 0)");
// Cost model (--predict).
ABSL_FLAG(bool, predict, false, "print the cost model's predictions instead of measuring");
ABSL_FLAG(double, compute_ms, 30.0,
          "measured forward+backward time of --per_gpu_batch images on one GPU (ms)");
ABSL_FLAG(int64_t, per_gpu_batch, 256, "images per GPU per step (weak scaling)");
ABSL_FLAG(std::string, nodes, "1,8,64", "comma-separated node counts");
ABSL_FLAG(int, gpus_per_node, 8, "GPUs per node");
ABSL_FLAG(double, nvlink_gbs, 360, "achieved NCCL bus bandwidth inside a node, GB/s");
ABSL_FLAG(double, ib_gbs, 45, "achieved InfiniBand bandwidth per GPU, GB/s");
ABSL_FLAG(double, alpha_intra_us, 15, "latency of one collective inside a node, us");
ABSL_FLAG(double, alpha_inter_us, 6, "latency per tree level between nodes, us");
ABSL_FLAG(double, bwd_fraction, 2.0 / 3, "backward's share of --compute_ms");
ABSL_FLAG(double, overlap, 1.0,
          "rate at which a started all-reduce progresses while backward computes, relative to "
          "after backward: 1 for NCCL; fitted 0.08-0.22 for Open MPI over TCP without a "
          "progress thread (docs/PARALLELISM.md section 8)");

namespace colonnade {
namespace {

using Clock = std::chrono::steady_clock;

struct Layout {
  int dp, mp;
};

struct Row {
  Layout layout;
  double fwd = 0, bwd = 0, sync = 0, overlap = 0, hidden = 0;
  double mp_mb = 0, dp_mb = 0, grad_mb = 0;
  int buckets = 0;
  double images_per_s = 0;
  std::string comm;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Synthetic images and labels keyed by global image index, so all layouts see the same.
void FillBatch(Net& net, uint64_t seed, int64_t step, int64_t global_batch, int64_t first,
               int classes) {
  Tensor& data = net.blob("data");
  const int64_t n = data.n(), per_image = data.size() / n;
  std::vector<float> x(data.size()), y(n);
  const uint64_t key = MixKey(seed, static_cast<uint64_t>(RandomPurpose::kSynthetic));
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t g = static_cast<uint64_t>(step * global_batch + first + i);
    for (int64_t e = 0; e < per_image; ++e) x[e * n + i] = PhiloxNormal(key, g, e);
    y[i] =
        static_cast<float>(static_cast<int>(PhiloxUniform(key, g, per_image) * classes) % classes);
  }
  data.CopyFromHost(x);
  net.blob("label").CopyFromHost(y);
}

double MaxOverWorld(double v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return v;
}

absl::StatusOr<Row> RunLayout(const Layout& lo, Device device, int rank) {
  const int64_t global_batch = absl::GetFlag(FLAGS_batch_size);
  absl::StatusOr<Mesh> mesh = Mesh::Create(MPI_COMM_WORLD, lo.mp);
  if (!mesh.ok()) return mesh.status();
  const std::string kind = absl::GetFlag(FLAGS_comm);
  auto mp_comm = CreateCommunicator(kind, mesh->mp_comm(), device);
  if (!mp_comm.ok()) return mp_comm.status();
  auto dp_comm = CreateCommunicator(kind, mesh->dp_comm(), device);
  if (!dp_comm.ok()) return dp_comm.status();

  ModelOptions mo;
  mo.input_size = absl::GetFlag(FLAGS_input_size);
  mo.num_classes = absl::GetFlag(FLAGS_num_classes);
  mo.columns = absl::GetFlag(FLAGS_columns);
  absl::StatusOr<ModelShard> shard =
      BuildModelShard(absl::GetFlag(FLAGS_model), mo, *mesh, mp_comm->get());
  if (!shard.ok()) return shard.status();
  Net& net = *shard->net;
  if (auto s = net.Build(global_batch / mesh->dp(), device); !s.ok()) return s;
  if (auto s = InitShardParams(*shard, absl::GetFlag(FLAGS_seed)); !s.ok()) return s;
  auto sync = GradientSync::Create(net, dp_comm->get(), absl::GetFlag(FLAGS_bucket_mb));
  if (!sync.ok()) return sync.status();
  const int classes = static_cast<int>(net.blob("probs").c());
  Backend* backend = GetBackend(device);

  auto now = [&]() {
    backend->Synchronize();
    return Clock::now();
  };
  auto secs = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  std::vector<double> fwd, bwd, sync_t, overlap;
  const int steps = absl::GetFlag(FLAGS_steps), warmup = absl::GetFlag(FLAGS_warmup);
  double mp_bytes = 0, dp_bytes = 0;
  for (int step = 0; step < warmup + steps; ++step) {
    const RunContext ctx =
        mesh->MakeRunContext(Phase::kTrain, absl::GetFlag(FLAGS_seed), step, global_batch);
    FillBatch(net, absl::GetFlag(FLAGS_seed), step, global_batch, ctx.image_offset, classes);
    // (1) forward, backward alone, then the whole all-reduce after it.
    MPI_Barrier(MPI_COMM_WORLD);
    auto t0 = now();
    net.Forward(ctx);
    auto t1 = now();
    net.Backward(ctx);
    auto t2 = now();
    if (auto s = (*sync)->Finish(); !s.ok()) return s;
    auto t3 = now();
    // (2) the same step with the buckets started during backward.
    (*mp_comm)->ResetStats();
    (*dp_comm)->ResetStats();
    net.Forward(ctx);
    MPI_Barrier(MPI_COMM_WORLD);
    auto t4 = now();
    net.Backward(ctx, (*sync)->AfterLayerHook());
    if (auto s = (*sync)->Finish(); !s.ok()) return s;
    auto t5 = now();
    mp_bytes = (*mp_comm)->stats().wire_bytes;
    dp_bytes = (*dp_comm)->stats().wire_bytes;
    if (step >= warmup) {
      fwd.push_back(secs(t0, t1));
      bwd.push_back(secs(t1, t2));
      sync_t.push_back(secs(t2, t3));
      overlap.push_back(secs(t4, t5));
    }
  }
  Row r;
  r.layout = lo;
  r.fwd = MaxOverWorld(Median(fwd));
  r.bwd = MaxOverWorld(Median(bwd));
  r.sync = MaxOverWorld(Median(sync_t));
  r.overlap = MaxOverWorld(Median(overlap));
  r.hidden = r.sync > 0 ? std::clamp((r.bwd + r.sync - r.overlap) / r.sync, 0.0, 1.0) : 1.0;
  r.mp_mb = MaxOverWorld(mp_bytes) / 1e6;
  r.dp_mb = MaxOverWorld(dp_bytes) / 1e6;
  r.grad_mb = MaxOverWorld(static_cast<double>((*sync)->stats().bytes_per_step)) / 1e6;
  r.buckets = static_cast<int>((*sync)->buckets().size());
  r.images_per_s = global_batch / (r.fwd + r.overlap);
  r.comm = absl::StrFormat("%s/%s", (*mp_comm)->backend(), (*dp_comm)->backend());
  if (rank == 0) {
    for (const std::string& line : shard->plan) LOG(INFO) << "  " << line;
  }
  return r;
}

int Predict() {
  ModelOptions mo;
  mo.input_size = absl::GetFlag(FLAGS_input_size);
  mo.num_classes = absl::GetFlag(FLAGS_num_classes);
  mo.columns = absl::GetFlag(FLAGS_columns);
  absl::StatusOr<std::unique_ptr<Net>> probe = BuildModel(absl::GetFlag(FLAGS_model), mo);
  if (!probe.ok()) {
    std::fprintf(stderr, "bench_comm: error: %s\n", std::string(probe.status().message()).c_str());
    return 2;
  }
  const int columns = (*probe)->columns();
  const Shape in = (*probe)->input_shape("data");
  probe->reset();
  ClusterModel cl;
  cl.gpus_per_node = absl::GetFlag(FLAGS_gpus_per_node);
  cl.nvlink_gbs = absl::GetFlag(FLAGS_nvlink_gbs);
  cl.ib_gbs = absl::GetFlag(FLAGS_ib_gbs);
  cl.alpha_intra_us = absl::GetFlag(FLAGS_alpha_intra_us);
  cl.alpha_inter_us = absl::GetFlag(FLAGS_alpha_inter_us);
  cl.overlap = absl::GetFlag(FLAGS_overlap);
  if (!(cl.overlap >= 0 && cl.overlap <= 1)) {
    std::fprintf(stderr, "bench_comm: error: --overlap=%g must be from 0 to 1\n", cl.overlap);
    return 2;
  }
  ComputeModel cm;
  cm.compute_ms = absl::GetFlag(FLAGS_compute_ms);
  cm.per_gpu_batch = absl::GetFlag(FLAGS_per_gpu_batch);
  cm.bwd_fraction = absl::GetFlag(FLAGS_bwd_fraction);
  cm.bucket_mb = absl::GetFlag(FLAGS_bucket_mb);
  std::vector<int> nodes;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_nodes), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1) {
      std::fprintf(stderr, "bench_comm: error: --nodes: bad count '%s'\n",
                   std::string(part).c_str());
      return 2;
    }
    nodes.push_back(n);
  }
  std::printf(
      "cost model: %s %lldx%lld, %d column(s); t_c = %.2f ms for %lld images on one GPU "
      "(backward %.0f%%); %d GPUs/node, NVLink %.1f GB/s, InfiniBand %.1f GB/s per GPU, "
      "latency %.0f us (node) + %.0f us/level; buckets %.3g MB; overlap %.2f\n",
      absl::GetFlag(FLAGS_model).c_str(), static_cast<long long>(in[1]),
      static_cast<long long>(in[2]), columns, cm.compute_ms,
      static_cast<long long>(cm.per_gpu_batch), cm.bwd_fraction * 100, cl.gpus_per_node,
      cl.nvlink_gbs, cl.ib_gbs, cl.alpha_intra_us, cl.alpha_inter_us, cm.bucket_mb, cl.overlap);
  std::printf("%5s %5s %-8s %8s %8s %8s %7s %8s %8s %8s %6s %11s %8s %8s\n", "GPUs", "nodes",
              "dp x mp", "batch", "fwd ms", "bwd ms", "mp ms", "AR ms", "exposed", "step ms", "eff",
              "no-overlap", "mp MB", "dp MB");
  for (int n : nodes) {
    for (int mp = 1; mp <= cl.gpus_per_node; ++mp) {
      if (cl.gpus_per_node % mp != 0 || columns % mp != 0) continue;
      absl::StatusOr<StepPrediction> p = PredictStep(absl::GetFlag(FLAGS_model), mo, n, mp, cl, cm);
      if (!p.ok()) {
        std::fprintf(stderr, "bench_comm: error: %s\n", std::string(p.status().message()).c_str());
        return 1;
      }
      std::printf(
          "%5d %5d %-8s %8lld %8.2f %8.2f %7.2f %8.2f %8.2f %8.2f %5.1f%% %10.1f%% %8.1f %8.1f\n",
          n * cl.gpus_per_node, n, absl::StrFormat("%dx%d", p->dp, p->mp).c_str(),
          static_cast<long long>(p->global_batch), p->fwd_ms, p->bwd_ms, p->mp_comm_ms,
          p->dp_comm_ms, p->exposed_ms, p->step_ms, p->efficiency * 100,
          p->efficiency_no_overlap * 100, p->mp_mb, p->dp_mb);
    }
  }
  return 0;
}

// The layouts to measure: --layouts, or every (dp, mp) the world, the model's columns and
// the node size allow.
absl::StatusOr<std::vector<Layout>> ChooseLayouts(int world, int local) {
  absl::StatusOr<std::unique_ptr<Net>> probe = BuildModel(absl::GetFlag(FLAGS_model), [] {
    ModelOptions mo;
    mo.input_size = absl::GetFlag(FLAGS_input_size);
    mo.num_classes = absl::GetFlag(FLAGS_num_classes);
    mo.columns = absl::GetFlag(FLAGS_columns);
    return mo;
  }());
  if (!probe.ok()) return probe.status();
  const int columns = (*probe)->columns();
  probe->reset();
  std::vector<Layout> layouts;
  const std::string spec = absl::GetFlag(FLAGS_layouts);
  if (spec == "all") {
    for (int mp = 1; mp <= world; ++mp) {
      if (world % mp == 0 && columns % mp == 0 && mp <= local &&
          ValidateLayout(world, mp, columns, absl::GetFlag(FLAGS_batch_size)).ok()) {
        layouts.push_back({world / mp, mp});
      }
    }
  } else {
    for (absl::string_view part : absl::StrSplit(spec, ',')) {
      std::vector<std::string> dm = absl::StrSplit(part, 'x');
      Layout lo{0, 0};
      if (dm.size() != 2 || !absl::SimpleAtoi(dm[0], &lo.dp) || !absl::SimpleAtoi(dm[1], &lo.mp)) {
        return absl::InvalidArgumentError("--layouts: bad layout '" + std::string(part) +
                                          "' (expected DPxMP)");
      }
      if (lo.dp * lo.mp != world) {
        return absl::InvalidArgumentError(
            absl::StrFormat("--layouts: %dx%d needs %d ranks, the world has %d", lo.dp, lo.mp,
                            lo.dp * lo.mp, world));
      }
      layouts.push_back(lo);
    }
  }
  for (const Layout& lo : layouts) {
    RETURN_IF_ERROR(ValidateLayout(world, lo.mp, columns, absl::GetFlag(FLAGS_batch_size)));
  }
  if (layouts.empty()) return absl::InvalidArgumentError("no layout fits");
  return layouts;
}

// The table on stdout, and with --csv as CSV (rank 0).
absl::Status PrintRows(const std::vector<Row>& rows, int world, const std::string& dev) {
  std::printf("bench_comm: %s, global batch %lld, %d rank(s), device %s, bucket %.3g MB\n",
              absl::GetFlag(FLAGS_model).c_str(),
              static_cast<long long>(absl::GetFlag(FLAGS_batch_size)), world, dev.c_str(),
              absl::GetFlag(FLAGS_bucket_mb));
  std::printf("%-7s %-9s %9s %9s %9s %11s %7s %11s %11s %11s %7s %9s\n", "dp x mp", "comm",
              "fwd ms", "bwd ms", "sync ms", "overlap ms", "hidden", "mp MB/step", "dp MB/step",
              "grad MB", "buckets", "img/s");
  for (const Row& r : rows) {
    // With dp = 1 there is no all-reduce to hide.
    const std::string hidden =
        r.layout.dp > 1 ? absl::StrFormat("%.0f%%", r.hidden * 100) : std::string("-");
    std::printf("%-7s %-9s %9.2f %9.2f %9.2f %11.2f %7s %11.2f %11.2f %11.2f %7d %9.1f\n",
                absl::StrFormat("%dx%d", r.layout.dp, r.layout.mp).c_str(), r.comm.c_str(),
                r.fwd * 1e3, r.bwd * 1e3, r.sync * 1e3, r.overlap * 1e3, hidden.c_str(), r.mp_mb,
                r.dp_mb, r.grad_mb, r.buckets, r.images_per_s);
  }
  const std::string csv = absl::GetFlag(FLAGS_csv);
  if (!csv.empty()) {
    std::string text =
        "dp,mp,comm,fwd_ms,bwd_ms,sync_ms,overlap_ms,hidden_fraction,mp_mb_per_step,"
        "dp_mb_per_step,grad_mb,buckets,images_per_s\n";
    for (const Row& r : rows) {
      text += absl::StrFormat("%d,%d,%s,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%d,%.2f\n",
                              r.layout.dp, r.layout.mp, r.comm, r.fwd * 1e3, r.bwd * 1e3,
                              r.sync * 1e3, r.overlap * 1e3, r.hidden, r.mp_mb, r.dp_mb, r.grad_mb,
                              r.buckets, r.images_per_s);
    }
    // Replaces an earlier table, never a checkpoint, dataset or device; a failed write
    // is an error (output_file.h).
    RETURN_IF_ERROR(WriteTextOutputFile(csv, "--csv", ExistingOutput::kReplaceText, text));
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  const Cli cli = {
      "bench_comm", "src/apps/bench_comm",
      "measures what the parallel layer communicates per training step and how much of "
      "the gradient all-reduce hides behind backward, for every (dp, mp) layout the world "
      "size allows; with --predict, prints the cost model's step time instead.\n\n"
      "  mpirun -np 8 bench_comm --model=alexnet --batch_size=256 --device=cuda\n"
      "  bench_comm --predict --model=alexnet --compute_ms=30 --per_gpu_batch=256"};
  // Before MPI_Init: --predict needs no MPI, and a bad flag ends every rank alike.
  if (std::optional<int> code = colonnade::ParseCommandLine(argc, argv, cli)) return *code;
  if (absl::GetFlag(FLAGS_predict)) return Predict();
  if (absl::Status s = InitMpi(&argc, &argv); !s.ok()) {
    std::fprintf(stderr, "bench_comm: error: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world > 1) SetLogRank(rank);
  auto fail = [&](const absl::Status& s, int code) {
    if (rank == 0)
      std::fprintf(stderr, "bench_comm: error: %s\n", std::string(s.message()).c_str());
    FinalizeMpi();
    return code;
  };
  if (absl::GetFlag(FLAGS_cpu_threads) > 0) SetCpuThreads(absl::GetFlag(FLAGS_cpu_threads));

  Device device = Device::kCPU;
  const std::string dev = absl::GetFlag(FLAGS_device);
  if (dev == "cuda") {
    device = Device::kCUDA;
  } else if (dev != "cpu") {
    return fail(absl::InvalidArgumentError("--device must be cpu or cuda"), 2);
  }
  int local_rank = 0, local = 1;
  {
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_size(node, &local);
    MPI_Allreduce(MPI_IN_PLACE, &local, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Comm_free(&node);
  }
  if (device == Device::kCUDA) {
    // One GPU per rank by local rank; more ranks than GPUs share them (then --comm=mpi).
    const int gpus = cuda::DeviceCount();
    absl::Status s = gpus > 0 ? cuda::RegisterBackend(local_rank % gpus)
                              : absl::FailedPreconditionError(
                                    "--device=cuda: no CUDA backend in this build or no GPU");
    if (!s.ok()) {
      std::fprintf(stderr, "bench_comm: error on rank %d: %s\n", rank,
                   std::string(s.message()).c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }

  // Layouts.
  absl::StatusOr<std::vector<Layout>> layouts = ChooseLayouts(world, local);
  if (!layouts.ok()) return fail(layouts.status(), 2);
  std::vector<Row> rows;
  for (const Layout& lo : *layouts) {
    absl::StatusOr<Row> r = RunLayout(lo, device, rank);
    if (!r.ok()) return fail(r.status(), 1);
    rows.push_back(*r);
  }
  // Only rank 0 writes, so no other rank waits on a failed write.
  if (rank == 0) {
    if (absl::Status s = PrintRows(rows, world, dev); !s.ok()) return fail(s, 1);
  }
  FinalizeMpi();
  return 0;
}

}  // namespace
}  // namespace colonnade

int main(int argc, char** argv) { return colonnade::Main(argc, argv); }
