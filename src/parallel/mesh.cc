#include "parallel/mesh.h"

#include <climits>
#include <cstdlib>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "parallel/watchdog.h"

namespace colonnade {

absl::Status MpiError(int code, const char* what) {
  if (code == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return absl::InternalError(absl::StrFormat("%s failed: %s", what, std::string(text, len)));
}

absl::Status ValidateLayout(int world_size, int mp, int columns, int64_t global_batch) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("world size %d is not positive", world_size));
  }
  if (mp < 1) return absl::InvalidArgumentError(absl::StrFormat("--mp=%d must be at least 1", mp));
  if (world_size % mp != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--mp=%d does not divide the world size %d (world = dp x mp)", mp, world_size));
  }
  if (columns < 1) {
    return absl::InvalidArgumentError(absl::StrFormat("--columns=%d must be at least 1", columns));
  }
  if (columns % mp != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the model's %d column(s) are not divisible by --mp=%d: each model-parallel rank must "
        "own whole columns (set --columns to a multiple of %d)",
        columns, mp, mp));
  }
  const int dp = world_size / mp;
  if (global_batch < 1 || global_batch % dp != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--batch_size=%d (the global batch) is not divisible by the %d data-parallel "
        "replicas (world %d / mp %d)",
        global_batch, dp, world_size, mp));
  }
  return absl::OkStatus();
}

Mesh::Comms::~Comms() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // too late to free; the handles die with MPI
  if (mp != MPI_COMM_NULL) MPI_Comm_free(&mp);
  if (dp != MPI_COMM_NULL) MPI_Comm_free(&dp);
  if (world != MPI_COMM_NULL) MPI_Comm_free(&world);
}

absl::StatusOr<Mesh> Mesh::Create(MPI_Comm world, int mp) {
  WatchdogLabel label("mesh set-up");
  Mesh m;
  MPI_Comm_rank(world, &m.world_rank_);
  MPI_Comm_size(world, &m.world_size_);
  // Pure checks first: every rank fails identically, before any collective.
  if (mp < 1 || m.world_size_ % mp != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--mp=%d does not divide the world size %d (world = dp x mp)", mp, m.world_size_));
  }
  m.mp_ = mp;
  m.dp_ = m.world_size_ / mp;
  m.dp_rank_ = m.world_rank_ / mp;
  m.mp_rank_ = m.world_rank_ % mp;

  auto comms = std::make_shared<Comms>();
  if (auto s = MpiError(MPI_Comm_dup(world, &comms->world), "MPI_Comm_dup"); !s.ok()) return s;
  MPI_Comm_set_errhandler(comms->world, MPI_ERRORS_RETURN);
  if (auto s = MpiError(MPI_Comm_split(comms->world, m.dp_rank_, m.mp_rank_, &comms->mp),
                        "MPI_Comm_split (mp group)");
      !s.ok()) {
    return s;
  }
  if (auto s = MpiError(MPI_Comm_split(comms->world, m.mp_rank_, m.dp_rank_, &comms->dp),
                        "MPI_Comm_split (dp group)");
      !s.ok()) {
    return s;
  }
  MPI_Comm_set_errhandler(comms->mp, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(comms->dp, MPI_ERRORS_RETURN);

  // Nodes. COLONNADE_TEST_RANKS_PER_NODE=n pretends that every n consecutive ranks form a
  // node, so the spanning check can be tested on one machine.
  MPI_Comm node = MPI_COMM_NULL;
  int fake = 0;
  if (const char* e = std::getenv("COLONNADE_TEST_RANKS_PER_NODE"); e && *e) {
    if (!absl::SimpleAtoi(e, &fake) || fake < 1) fake = 0;
  }
  int rc = fake > 0 ? MPI_Comm_split(comms->world, m.world_rank_ / fake, m.world_rank_, &node)
                    : MPI_Comm_split_type(comms->world, MPI_COMM_TYPE_SHARED, m.world_rank_,
                                          MPI_INFO_NULL, &node);
  if (auto s = MpiError(rc, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)"); !s.ok()) return s;
  MPI_Comm_rank(node, &m.local_rank_);
  MPI_Comm_size(node, &m.local_size_);
  // A node's id: the smallest world rank on it.
  int node_id = m.world_rank_;
  MPI_Allreduce(MPI_IN_PLACE, &node_id, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  int is_node_leader = node_id == m.world_rank_ ? 1 : 0;
  MPI_Allreduce(&is_node_leader, &m.num_nodes_, 1, MPI_INT, MPI_SUM, comms->world);
  // An mp group spans nodes when its ranks disagree on the node id.
  int lo = node_id, hi = node_id;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, comms->mp);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, comms->mp);
  // Agree on the first bad group everywhere so that every rank returns the same error.
  int bad_group = lo != hi ? m.dp_rank_ : INT_MAX;
  MPI_Allreduce(MPI_IN_PLACE, &bad_group, 1, MPI_INT, MPI_MIN, comms->world);
  if (bad_group != INT_MAX) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the model-parallel group of ranks %d-%d spans two nodes; the mp ranks of a group must "
        "share a node: use an --mp that divides the number of ranks per node and place "
        "consecutive ranks on the same node",
        bad_group * mp, bad_group * mp + mp - 1));
  }
  m.comms_ = std::move(comms);
  return m;
}

int Mesh::GpuIndex(int visible_gpus) const {
  return visible_gpus > 0 ? local_rank_ % visible_gpus : 0;
}

RunContext Mesh::MakeRunContext(Phase phase, uint64_t seed, int64_t step,
                                int64_t global_batch) const {
  RunContext ctx;
  ctx.phase = phase;
  ctx.seed = seed;
  ctx.step = step;
  ctx.global_batch = global_batch;
  ctx.image_offset = static_cast<int64_t>(dp_rank_) * (global_batch / dp_);
  ctx.loss_scale = 1.0f / static_cast<float>(global_batch);
  return ctx;
}

std::string Mesh::ToString() const {
  return absl::StrFormat("world %d = dp %d x mp %d on %d node(s)", world_size_, dp_, mp_,
                         num_nodes_);
}

absl::Status InitMpi(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
#if defined(OPEN_MPI) && OMPI_MAJOR_VERSION < 5
    // A process started without a launcher is an MPI singleton, and Open MPI 4 starts an
    // orted daemon beside it that only MPI_Comm_spawn would need (Colonnade never spawns):
    // 0.3 s of wall time and 0.13 s of CPU on every `trainer --help` and one-process run
    // (experiments/ci_time). Isolated, the singleton starts none. A launched rank's ess is
    // its launcher's and ignores this; a value the user set wins.
    setenv("OMPI_MCA_ess_singleton_isolated", "1", /*overwrite=*/0);
#endif
    int provided = 0;
    if (auto s = MpiError(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided),
                          "MPI_Init_thread");
        !s.ok()) {
      return s;
    }
    if (provided < MPI_THREAD_FUNNELED) {
      return absl::FailedPreconditionError(
          "the MPI library does not provide MPI_THREAD_FUNNELED, which Colonnade needs");
    }
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return absl::OkStatus();
}

void FinalizeMpi() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();  // watched, like every blocking call
  StopCollectiveWatchdog();
}

int LocalRankFromEnvironment() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID",
                           "MV2_COMM_WORLD_LOCAL_RANK", "PMI_LOCAL_RANK", "PMIX_LOCAL_RANK"}) {
    const char* v = std::getenv(name);
    int r = 0;
    if (v && *v && absl::SimpleAtoi(v, &r) && r >= 0) return r;
  }
  return -1;
}

absl::Status AllReduceSumHost(MPI_Comm comm, double* values, int count) {
  return MpiError(MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, MPI_SUM, comm),
                  "MPI_Allreduce (host sums)");
}

absl::Status BroadcastStatus(const absl::Status& s, int root, MPI_Comm comm) {
  int code = static_cast<int>(s.code());
  MPI_Bcast(&code, 1, MPI_INT, root, comm);
  const std::string message = BroadcastString(std::string(s.message()), root, comm);
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

std::string BroadcastString(const std::string& s, int root, MPI_Comm comm) {
  int len = static_cast<int>(s.size());
  MPI_Bcast(&len, 1, MPI_INT, root, comm);
  std::string out = s;
  out.resize(len);
  MPI_Bcast(out.data(), len, MPI_CHAR, root, comm);
  return out;
}

}  // namespace colonnade
