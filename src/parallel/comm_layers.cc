#include "parallel/comm_layers.h"

#include "absl/strings/str_format.h"
#include "core/log.h"
#include "parallel/watchdog.h"

namespace colonnade {
namespace {

absl::Status OneCHWNInput(const Layer& l, const std::vector<Shape>& in) {
  if (in.size() != 1 || in[0].rank() != 4) {
    return absl::InvalidArgumentError(
        absl::StrFormat("layer %s (%s) takes one CHWN input", l.name(), l.type()));
  }
  return absl::OkStatus();
}

// Collective failures inside a layer cannot be returned through Layer's void interface.
// They mean a peer or the interconnect failed: stop this rank loudly (mpirun then ends
// the job) rather than compute on garbage.
void CheckComm(const absl::Status& s, const Layer& l) {
  CHECK(s.ok()) << "layer " << l.name() << ": " << s.message();
}

}  // namespace

// ---------------------------------------------------------------------------------------
AllGatherChannelsLayer::AllGatherChannelsLayer(std::string name, Communicator* comm,
                                               BackwardMode mode)
    : CommLayer(std::move(name)), comm_(comm), mode_(mode) {}

absl::StatusOr<std::vector<Shape>> AllGatherChannelsLayer::Setup(const std::vector<Shape>& in) {
  if (auto s = OneCHWNInput(*this, in); !s.ok()) return s;
  Shape out = in[0];
  out[0] *= comm_->size();
  return std::vector<Shape>{out};
}

void AllGatherChannelsLayer::Forward(Ops&, const RunContext&, const std::vector<const Tensor*>& x,
                                     const std::vector<Tensor*>& y) {
  WatchdogLabel label("column exchange in the mp group");
  CheckComm(comm_->AllGather(*x[0], *y[0]), *this);
}

void AllGatherChannelsLayer::Backward(Ops& ops, const RunContext&,
                                      const std::vector<const Tensor*>& x,
                                      const std::vector<const Tensor*>&,
                                      const std::vector<const Tensor*>& dy,
                                      const std::vector<Tensor*>& dx) {
  // Every rank takes the same branch (dx is null only for net inputs, alike everywhere).
  if (!dx[0]) return;
  if (mode_ == kSlice) {
    ops.CopyChannelsOut(*dy[0], comm_->rank() * x[0]->c(), *dx[0]);
  } else {
    WatchdogLabel label("column exchange in the mp group");
    CheckComm(comm_->ReduceScatterSum(*dy[0], *dx[0]), *this);
  }
}

// ---------------------------------------------------------------------------------------
SliceChannelsLayer::SliceChannelsLayer(std::string name, Communicator* comm)
    : CommLayer(std::move(name)), comm_(comm) {}

absl::StatusOr<std::vector<Shape>> SliceChannelsLayer::Setup(const std::vector<Shape>& in) {
  if (auto s = OneCHWNInput(*this, in); !s.ok()) return s;
  if (in[0].c() % comm_->size() != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("layer %s: %d channels do not split over %d model-parallel ranks", name(),
                        in[0].c(), comm_->size()));
  }
  Shape out = in[0];
  out[0] /= comm_->size();
  return std::vector<Shape>{out};
}

void SliceChannelsLayer::Forward(Ops& ops, const RunContext&, const std::vector<const Tensor*>& x,
                                 const std::vector<Tensor*>& y) {
  ops.CopyChannelsOut(*x[0], comm_->rank() * y[0]->c(), *y[0]);
}

void SliceChannelsLayer::Backward(Ops&, const RunContext&, const std::vector<const Tensor*>&,
                                  const std::vector<const Tensor*>&,
                                  const std::vector<const Tensor*>& dy,
                                  const std::vector<Tensor*>& dx) {
  if (!dx[0]) return;
  WatchdogLabel label("column exchange in the mp group");
  CheckComm(comm_->AllGather(*dy[0], *dx[0]), *this);
}

// ---------------------------------------------------------------------------------------
GradSumLayer::GradSumLayer(std::string name, Communicator* comm)
    : CommLayer(std::move(name)), comm_(comm) {}

absl::StatusOr<std::vector<Shape>> GradSumLayer::Setup(const std::vector<Shape>& in) {
  if (auto s = OneCHWNInput(*this, in); !s.ok()) return s;
  return std::vector<Shape>{in[0]};
}

void GradSumLayer::Forward(Ops& ops, const RunContext&, const std::vector<const Tensor*>& x,
                           const std::vector<Tensor*>& y) {
  ops.Copy(*x[0], *y[0]);
}

void GradSumLayer::Backward(Ops& ops, const RunContext&, const std::vector<const Tensor*>&,
                            const std::vector<const Tensor*>&, const std::vector<const Tensor*>& dy,
                            const std::vector<Tensor*>& dx) {
  if (!dx[0]) return;
  ops.Copy(*dy[0], *dx[0]);
  WatchdogLabel label("column exchange in the mp group");
  CheckComm(comm_->AllReduceSum(*dx[0]), *this);
}

}  // namespace colonnade
