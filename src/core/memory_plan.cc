#include "core/memory_plan.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/models.h"
#include "core/net.h"

namespace colonnade {
namespace {

int64_t AlignUp(int64_t n, int64_t a) { return a <= 1 ? n : (n + a - 1) / a * a; }

// Builds the buffers, the schedule and each layer's binding, in the order Net runs the
// step; the buffers' intervals are derived afterwards from the steps (MarkLiveness).
class ScheduleBuilder {
 public:
  ScheduleBuilder(const std::vector<LayerEntry>& layers, const std::vector<std::string>& inputs,
                  const std::map<std::string, Shape>& shapes, const std::set<std::string>& pinned,
                  const MemoryPlanOptions& options, MemoryPlan* plan)
      : layers_(layers),
        inputs_(inputs.begin(), inputs.end()),
        shapes_(shapes),
        pinned_(pinned),
        bf16_blobs_(options.bf16_blobs),
        add_dx_layers_(options.add_dx_layers),
        shared_dx_layers_(options.shared_dx_layers),
        plan_(plan) {}

  void Run(RecomputePolicy recompute) {
    for (const std::string& in : inputs_) Activation(in);
    plan_->layers.resize(layers_.size());
    for (size_t i = 0; i < layers_.size(); ++i) Forward(static_cast<int>(i));
    if (recompute != RecomputePolicy::kOff) FindRecomputable(recompute);
    for (int i = static_cast<int>(layers_.size()) - 1; i >= 0; --i) Backward(i);
  }

 private:
  int NewBuffer(PlanBuffer::Kind kind, const std::string& blob, std::string name) {
    PlanBuffer b;
    b.kind = kind;
    b.blob = blob;
    b.name = std::move(name);
    b.shape = shapes_.at(blob);
    b.dtype = bf16_blobs_.count(blob) ? DType::kBF16 : DType::kFloat32;
    b.external = kind == PlanBuffer::kActivation && inputs_.count(blob) > 0;
    plan_->buffers.push_back(std::move(b));
    return static_cast<int>(plan_->buffers.size()) - 1;
  }
  int Activation(const std::string& blob) {
    auto it = plan_->activation.find(blob);
    if (it != plan_->activation.end()) return it->second;
    return plan_->activation[blob] = NewBuffer(PlanBuffer::kActivation, blob, blob);
  }
  int Gradient(const std::string& blob) {
    auto it = plan_->gradient.find(blob);
    if (it != plan_->gradient.end()) return it->second;
    return plan_->gradient[blob] = NewBuffer(PlanBuffer::kGradient, blob, "d " + blob);
  }

  void Forward(int i) {
    const LayerEntry& e = layers_[i];
    LayerBinding& bind = plan_->layers[i];
    PlanStep s;
    s.kind = PlanStep::kForward;
    s.layer = i;
    for (const std::string& b : e.inputs) bind.x.push_back(Activation(b));
    for (const std::string& b : e.outputs) bind.y.push_back(Activation(b));
    s.reads = bind.x;
    s.writes = bind.y;
    plan_->steps.push_back(std::move(s));
  }

  // The blobs MemoryPlanOptions::recompute names (its comment has the rule), in forward
  // order: activation buffer -> the blobs to compute, intermediates first, the blob last.
  void FindRecomputable(RecomputePolicy policy) {
    for (size_t i = 0; i < layers_.size(); ++i) {
      const LayerEntry& e = layers_[i];
      const BackwardReads r = e.layer->backward_reads();
      for (const std::string& b : e.outputs) writers_[b].push_back(static_cast<int>(i));
      if (r.x)
        for (const std::string& b : e.inputs) back_readers_[b].push_back(static_cast<int>(i));
      if (r.y)
        for (const std::string& b : e.outputs) back_readers_[b].push_back(static_cast<int>(i));
    }
    for (const LayerEntry& p : layers_) {
      if (p.outputs.size() != 1 || !back_readers_.count(p.outputs[0])) continue;
      const std::string& blob = p.outputs[0];
      if (&layers_[writers_.at(blob)[0]] != &p) continue;  // an in-place layer
      const std::vector<int>& readers = back_readers_.at(blob);
      const int first_reader = *std::max_element(readers.begin(), readers.end());
      std::vector<std::string> order;
      if (!Rewritable(blob, policy) || !Recipe(blob, first_reader, policy, 0, &order)) continue;
      chosen_.insert(blob);
      recomputable_[plan_->activation.at(blob)] = std::move(order);
    }
  }

  // Written by layers the policy allows that can recompute: a producer with one output,
  // then only in-place layers of one input.
  bool Rewritable(const std::string& blob, RecomputePolicy policy) const {
    if (pinned_.count(blob) || inputs_.count(blob)) return false;
    const std::vector<int>& ws = writers_.at(blob);
    if (layers_[ws[0]].outputs.size() != 1) return false;
    for (size_t k = 0; k < ws.size(); ++k) {
      const LayerEntry& m = layers_[ws[k]];
      if (!Allowed(*m.layer, policy)) return false;
      if (k > 0 && (m.inputs != std::vector<std::string>{blob} || m.outputs.size() != 1))
        return false;
    }
    return true;
  }
  static bool Allowed(const Layer& l, RecomputePolicy policy) {
    const std::string type = l.type();
    const bool add = policy == RecomputePolicy::kBatchNormReluAdd && type == "add";
    return l.can_recompute() && (type == "batchnorm" || type == "relu" || add);
  }

  // Appends to `order` what computing `blob` before the Backward of layer `first_reader`
  // needs: each input of its producer is live then (a forward buffer that a later Backward
  // reads, an input, a pinned blob) or is recomputed first (no Backward reads it).
  bool Recipe(const std::string& blob, int first_reader, RecomputePolicy policy, int depth,
              std::vector<std::string>* order) const {
    for (const std::string& in : layers_[writers_.at(blob)[0]].inputs) {
      if (pinned_.count(in) || inputs_.count(in)) continue;
      auto readers = back_readers_.find(in);
      if (readers != back_readers_.end()) {  // read by a Backward: live if not recomputed
        const bool later = std::any_of(readers->second.begin(), readers->second.end(),
                                       [&](int j) { return j < first_reader; });
        if (!later || chosen_.count(in)) return false;
        continue;
      }
      if (std::count(order->begin(), order->end(), in)) continue;
      if (depth >= 4 || !Rewritable(in, policy) ||
          !Recipe(in, first_reader, policy, depth + 1, order))
        return false;
    }
    order->push_back(blob);
    return true;
  }

  // Emits the recompute step of activation buffer `id` (FindRecomputable's order): its
  // intermediates' buffers live for this step only, the blob's until its last reader.
  void EmitRecompute(int id, LayerBinding& bind) {
    PlanStep s;
    s.kind = PlanStep::kRecompute;
    s.recompute = static_cast<int>(plan_->recomputes.size());
    Recomputation r;
    std::map<std::string, int> made;  // blob -> its kRecomputed buffer in this step
    for (const std::string& blob : recomputable_.at(id)) {
      const int out = NewBuffer(PlanBuffer::kRecomputed, blob, blob + " (recomputed)");
      made[blob] = out;
      s.writes.push_back(out);
      const std::vector<int>& ws = writers_.at(blob);
      s.layer = ws[0];
      Recomputation::Run run{ws[0], {}, out};
      for (const std::string& in : layers_[ws[0]].inputs) {
        auto m = made.find(in);
        run.x.push_back(m != made.end() ? m->second : plan_->activation.at(in));
        if (m == made.end()) s.reads.push_back(run.x.back());
      }
      r.runs.push_back(std::move(run));
      for (size_t k = 1; k < ws.size(); ++k) r.runs.push_back({ws[k], {out}, out});
      r.buffer = out;
    }
    recomputed_[id] = r.buffer;
    bind.recompute.push_back(s.recompute);
    plan_->recomputes.push_back(std::move(r));
    plan_->steps.push_back(std::move(s));
  }

  // The buffers Backward of `bind`'s layer binds for x and y; the first reader (in
  // backward order) of a recomputed blob is preceded by its recompute step. `reads`: the
  // activation buffers its code reads.
  void BindBackward(const std::vector<int>& reads, LayerBinding& bind) {
    for (int id : reads)
      if (recomputable_.count(id) && !recomputed_.count(id)) EmitRecompute(id, bind);
    auto backward_id = [this](int id) {
      auto it = recomputed_.find(id);
      return it == recomputed_.end() ? id : it->second;
    };
    for (int id : bind.x) bind.back_x.push_back(backward_id(id));
    for (int id : bind.y) bind.back_y.push_back(backward_id(id));
  }

  // Mirrors the gradient rule of Net::Backward: the first layer (in backward order) that
  // produces a blob's input gradient writes its gradient buffer, later ones a scratch
  // buffer that is then added (each addition its own step and its own scratch buffer, so
  // a scratch lives only from its layer's Backward to its addition), or, for a layer of
  // add_dx_layers_, the gradient buffer, which its Backward reads and adds to.
  void Backward(int i) {
    const LayerEntry& e = layers_[i];
    LayerBinding& bind = plan_->layers[i];
    const BackwardReads reads = e.layer->backward_reads();
    PlanStep s;
    s.kind = PlanStep::kBackward;
    s.layer = i;
    for (const std::string& b : e.outputs) bind.dy.push_back(Gradient(b));
    std::vector<int> read_activations;
    if (reads.x) read_activations.insert(read_activations.end(), bind.x.begin(), bind.x.end());
    if (reads.y) read_activations.insert(read_activations.end(), bind.y.begin(), bind.y.end());
    BindBackward(read_activations, bind);
    auto add = [&s](bool read, const std::vector<int>& ids) {
      std::vector<int>& to = read ? s.reads : s.touches;
      to.insert(to.end(), ids.begin(), ids.end());
    };
    add(reads.x, bind.back_x);
    add(reads.y, bind.back_y);
    add(reads.dy, bind.dy);
    if (const int g = SharedInputGradient(i); g >= 0) {
      bind.dx = {g, g};
      s.writes.push_back(g);
      plan_->steps.push_back(std::move(s));
      return;
    }
    for (size_t k = 0; k < e.inputs.size(); ++k) {
      const std::string& b = e.inputs[k];
      const bool in_place = k < e.outputs.size() && e.outputs[k] == b;
      if (inputs_.count(b)) {
        bind.dx.push_back(-1);
      } else if (in_place || !written_[b]) {
        bind.dx.push_back(Gradient(b));
        written_[b] = true;
      } else if (e.inputs.size() == 1 && add_dx_layers_.count(i)) {
        bind.dx.push_back(Gradient(b));  // Backward adds to it (LayerBinding::dx_add)
        bind.dx_add = true;
        s.reads.push_back(bind.dx.back());
      } else {
        const int scratch = NewBuffer(PlanBuffer::kScratch, b,
                                      absl::StrCat("d ", b, " (from ", e.layer->name(), ")"));
        bind.dx.push_back(scratch);
        bind.accumulate.push_back({Gradient(b), scratch});
      }
      if (bind.dx.back() >= 0) s.writes.push_back(bind.dx.back());
    }
    plan_->steps.push_back(std::move(s));
    for (const auto& [grad, scratch] : bind.accumulate) {
      PlanStep a;
      a.kind = PlanStep::kAccumulate;
      a.layer = i;
      a.reads = {grad, scratch};
      a.writes = {grad};
      plan_->steps.push_back(std::move(a));
    }
  }

  // For a layer of shared_dx_layers_ whose two inputs may get one gradient buffer (the rule
  // at MemoryPlanOptions::shared_dx_layers), that buffer, now the gradient of both; else -1.
  // Input e (exclusive) is read by this layer alone and written by one producer p, not in
  // place; every other layer that reads input o, or rectifies it in place, runs its Backward
  // after p's (a smaller index), and only those layers write o's gradient after this one. So
  // the buffer is e's gradient until p's Backward has read it and o's from then on.
  int SharedInputGradient(int i) {
    const LayerEntry& l = layers_[i];
    if (!shared_dx_layers_.count(i) || l.inputs.size() != 2) return -1;
    for (const std::string& b : l.inputs) {
      if (inputs_.count(b) || written_[b] || b == l.outputs[0]) return -1;
    }
    if (l.inputs[0] == l.inputs[1] || !(shapes_.at(l.inputs[0]) == shapes_.at(l.inputs[1])) ||
        bf16_blobs_.count(l.inputs[0]) != bf16_blobs_.count(l.inputs[1]))
      return -1;
    // The layers whose inputs (or outputs) name blob b, in order.
    auto naming = [&](const std::string& b, std::vector<std::string> LayerEntry::*list) {
      std::vector<int> r;
      for (size_t j = 0; j < layers_.size(); ++j) {
        const std::vector<std::string>& names = layers_[j].*list;
        if (std::count(names.begin(), names.end(), b)) r.push_back(static_cast<int>(j));
      }
      return r;
    };
    auto readers = [&](const std::string& b) { return naming(b, &LayerEntry::inputs); };
    auto writers = [&](const std::string& b) { return naming(b, &LayerEntry::outputs); };
    for (int k = 0; k < 2; ++k) {
      const std::string& e = l.inputs[k];
      const std::string& o = l.inputs[1 - k];
      const std::vector<int> producer = writers(e);
      if (readers(e) != std::vector<int>{i} || producer.size() != 1) continue;
      const int p = producer[0];
      const std::vector<int> others = readers(o);
      if (!std::all_of(others.begin(), others.end(), [&](int j) { return j == i || j < p; }))
        continue;
      const int g = NewBuffer(PlanBuffer::kGradient, o, absl::StrCat("d ", o, " = d ", e));
      plan_->gradient[e] = plan_->gradient[o] = g;
      written_[e] = written_[o] = true;
      return g;
    }
    return -1;
  }

  const std::vector<LayerEntry>& layers_;
  const std::set<std::string> inputs_;
  const std::map<std::string, Shape>& shapes_;
  const std::set<std::string>& pinned_;
  const std::set<std::string>& bf16_blobs_;
  const std::set<int>& add_dx_layers_;
  const std::set<int>& shared_dx_layers_;
  MemoryPlan* plan_;
  std::map<std::string, bool> written_;
  // Recomputation (FindRecomputable): every blob's writers and the layers whose Backward
  // reads it; the blobs chosen; activation buffer -> blobs to compute (itself last);
  // activation buffer -> its kRecomputed buffer, once emitted.
  std::map<std::string, std::vector<int>> writers_, back_readers_;
  std::set<std::string> chosen_;
  std::map<int, std::vector<std::string>> recomputable_;
  std::map<int, int> recomputed_;
};

// Intervals from the steps; pins; buffers read before any write become zero-filled.
void MarkLiveness(const std::set<std::string>& pinned_blobs, MemoryPlan* plan) {
  std::vector<int> first_write(plan->buffers.size(), -1), first_read(plan->buffers.size(), -1);
  auto use = [&](int id, int t) {
    PlanBuffer& b = plan->buffers[id];
    if (b.first < 0 || t < b.first) b.first = t;
    b.last = std::max(b.last, t);
  };
  for (int t = 0; t < static_cast<int>(plan->steps.size()); ++t) {
    const PlanStep& s = plan->steps[t];
    for (int id : s.reads) {
      use(id, t);
      if (first_read[id] < 0) first_read[id] = t;
    }
    for (int id : s.writes) {
      use(id, t);
      if (first_write[id] < 0) first_write[id] = t;
    }
  }
  // A buffer only bound to an argument (an activation a Backward does not read, the
  // gradient of "loss") needs no live data: touching does not extend a life. One that is
  // never read nor written still gets a place, live at its first touch.
  for (int t = 0; t < static_cast<int>(plan->steps.size()); ++t)
    for (int id : plan->steps[t].touches)
      if (plan->buffers[id].first < 0) use(id, t);
  for (size_t id = 0; id < plan->buffers.size(); ++id) {
    PlanBuffer& b = plan->buffers[id];
    const bool read_unwritten =
        first_read[id] >= 0 && (first_write[id] < 0 || first_write[id] >= first_read[id]);
    b.zero = !b.external && read_unwritten;
    b.pinned = b.external || b.zero ||
               (b.kind == PlanBuffer::kActivation && pinned_blobs.count(b.blob) > 0);
    if (b.pinned || b.first < 0) {
      b.first = 0;
      b.last = std::max(0, static_cast<int>(plan->steps.size()) - 1);
    }
  }
}

bool Overlap(const PlanBuffer& a, const PlanBuffer& b) {
  return a.first <= b.last && b.first <= a.last;
}

// Greedy by size (TFLite's arena planner): largest buffers first, each at the smallest
// gap that holds it among the already placed buffers whose lives overlap its own, or
// above them all.
int64_t PlaceBuffers(int64_t align, MemoryPlan* plan) {
  std::vector<PlanBuffer>& bufs = plan->buffers;
  std::vector<int> order;
  for (size_t i = 0; i < bufs.size(); ++i)
    if (!bufs[i].external) order.push_back(static_cast<int>(i));
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (bufs[a].words() != bufs[b].words()) return bufs[a].words() > bufs[b].words();
    return bufs[a].first < bufs[b].first;
  });
  std::vector<int> placed;
  int64_t arena = 0;
  for (int id : order) {
    PlanBuffer& b = bufs[id];
    const int64_t size = AlignUp(std::max<int64_t>(b.words(), 1), align);
    std::vector<std::pair<int64_t, int64_t>> taken;  // [offset, end) of overlapping lives
    for (int p : placed) {
      if (!Overlap(b, bufs[p])) continue;
      taken.push_back(
          {bufs[p].offset, bufs[p].offset + AlignUp(std::max<int64_t>(bufs[p].words(), 1), align)});
    }
    std::sort(taken.begin(), taken.end());
    int64_t best = -1, best_gap = 0, end = 0;
    for (const auto& [o, e] : taken) {
      if (o - end >= size && (best < 0 || o - end < best_gap)) {
        best = end;
        best_gap = o - end;
      }
      end = std::max(end, e);
    }
    b.offset = best >= 0 ? best : end;
    arena = std::max(arena, b.offset + size);
    placed.push_back(id);
  }
  return arena;
}

}  // namespace

absl::StatusOr<MemoryPlan> PlanMemory(const std::vector<LayerEntry>& layers,
                                      const std::vector<std::string>& inputs,
                                      const std::map<std::string, Shape>& shapes,
                                      const MemoryPlanOptions& options) {
  MemoryPlan plan;
  plan.share = options.share;
  for (const LayerEntry& e : layers) {
    for (const auto* names : {&e.inputs, &e.outputs})
      for (const std::string& b : *names)
        if (!shapes.count(b)) return absl::InvalidArgumentError("no shape for blob " + b);
  }
  for (const std::string& in : inputs) {
    auto it = shapes.find(in);
    if (it == shapes.end()) return absl::InvalidArgumentError("no shape for input " + in);
    plan.batch = it->second.n();
  }
  std::set<std::string> pinned = options.pinned;
  pinned.insert({"loss", "probs", kLogitsBlob});
  for (const std::string& b : options.bf16_blobs) {
    if (pinned.count(b) || std::count(inputs.begin(), inputs.end(), b)) {
      return absl::InvalidArgumentError("blob " + b +
                                        " is a net input or pinned: it cannot be stored in bf16");
    }
  }
  ScheduleBuilder(layers, inputs, shapes, pinned, options, &plan).Run(options.recompute);
  MarkLiveness(pinned, &plan);
  if (plan.share) plan.arena_elements = PlaceBuffers(options.align_elements, &plan);
  return plan;
}

int64_t MemoryPlan::planned_bytes() const {
  return share ? arena_elements * static_cast<int64_t>(sizeof(float)) : unshared_bytes();
}

int64_t MemoryPlan::unshared_bytes() const {
  // As Net allocates without sharing: one scratch buffer per blob serves all its additions,
  // and a recomputed blob is written again into its own activation buffer.
  int64_t n = 0;
  std::set<std::string> scratch_blobs;
  for (const PlanBuffer& b : buffers) {
    if (b.external || b.kind == PlanBuffer::kRecomputed) continue;
    if (b.kind == PlanBuffer::kScratch && !scratch_blobs.insert(b.blob).second) continue;
    n += b.bytes();
  }
  return n;
}

int64_t MemoryPlan::input_bytes() const {
  int64_t n = 0;
  for (const PlanBuffer& b : buffers)
    if (b.external) n += b.bytes();
  return n;
}

std::string MemoryPlan::StepName(int step, const std::vector<LayerEntry>& layers) const {
  const PlanStep& s = steps[step];
  const char* tags[] = {"F", "B", "A", "R"};
  const char* tag = tags[s.kind];
  return absl::StrCat(tag, s.layer, " ", layers[s.layer].layer->name());
}

std::string MemoryPlan::Format(const std::vector<LayerEntry>& layers) const {
  std::vector<int> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return buffers[a].first < buffers[b].first; });
  const char* kinds[] = {"act", "grad", "scratch", "recomp"};
  std::string out = absl::StrFormat(
      "memory plan (batch %d, %s, %d recomputed): %d buffers over %d steps (F = forward, B = "
      "backward, A = gradient addition, R = recompute of the layer's output (and what it "
      "needs) before the backward step after it; then the layer's index and name)\n",
      batch, share ? "shared arena" : "one allocation each", recomputes.size(), buffers.size(),
      steps.size());
  absl::StrAppendFormat(&out, "%-40s %-7s %-18s %12s %12s  %-40s %s\n", "buffer", "kind", "shape",
                        "bytes", "byte offset", "live", "shares memory with");
  for (int id : order) {
    const PlanBuffer& b = buffers[id];
    std::string live =
        b.pinned ? (b.external ? "input (own allocation)"
                    : b.zero   ? "whole step (zero-filled)"
                               : "whole step (pinned)")
                 : absl::StrCat(StepName(b.first, layers), " .. ", StepName(b.last, layers));
    std::vector<std::string> shares;
    if (share && !b.external) {
      for (int o : order) {
        const PlanBuffer& c = buffers[o];
        if (o == id || c.external) continue;
        if (c.offset < b.offset + b.words() && b.offset < c.offset + c.words())
          shares.push_back(c.name);
      }
    }
    // The first few (a deep net's early buffers share with hundreds of later ones).
    constexpr size_t kShown = 6;
    std::string shared =
        absl::StrJoin(shares.begin(), shares.begin() + std::min(shares.size(), kShown), ", ");
    if (shares.size() > kShown) absl::StrAppend(&shared, " and ", shares.size() - kShown, " more");
    absl::StrAppendFormat(
        &out, "%-40s %-7s %-18s %12d %12s  %-40s %s\n", b.name, kinds[b.kind],
        b.dtype == DType::kBF16 ? b.shape.ToString() + " bf16" : b.shape.ToString(), b.bytes(),
        share && !b.external ? absl::StrCat(b.offset * 4) : "-", live, shared);
  }
  absl::StrAppendFormat(&out,
                        "activation/gradient memory: %.1f MiB planned (%s), %.1f MiB with one "
                        "buffer each; inputs %.1f MiB\n",
                        planned_bytes() / 1048576.0, share ? "one arena" : "plan off",
                        unshared_bytes() / 1048576.0, input_bytes() / 1048576.0);
  return out;
}

absl::Status CheckMemoryPlan(const MemoryPlan& plan) {
  const std::vector<PlanBuffer>& bufs = plan.buffers;
  std::vector<bool> written(bufs.size(), false);
  for (size_t id = 0; id < bufs.size(); ++id) written[id] = bufs[id].external || bufs[id].zero;
  for (int t = 0; t < static_cast<int>(plan.steps.size()); ++t) {
    const PlanStep& s = plan.steps[t];
    for (int id : s.reads) {
      if (!written[id]) {
        return absl::InternalError(
            absl::StrFormat("step %d (layer %d) reads buffer %s before any step writes it", t,
                            s.layer, bufs[id].name));
      }
    }
    for (const auto* ids : {&s.reads, &s.writes}) {
      for (int id : *ids) {
        if (t < bufs[id].first || t > bufs[id].last) {
          return absl::InternalError(
              absl::StrFormat("step %d uses buffer %s outside its interval [%d, %d]", t,
                              bufs[id].name, bufs[id].first, bufs[id].last));
        }
      }
    }
    for (int id : s.writes) {
      written[id] = true;
      if ((bufs[id].kind == PlanBuffer::kRecomputed) != (s.kind == PlanStep::kRecompute)) {
        return absl::InternalError(absl::StrFormat(
            "step %d (layer %d) writes %s: only recompute steps write recomputed buffers", t,
            s.layer, bufs[id].name));
      }
    }
    for (int id : s.reads) {
      if (bufs[id].kind == PlanBuffer::kRecomputed && s.kind != PlanStep::kBackward) {
        return absl::InternalError(absl::StrFormat(
            "step %d (layer %d) reads recomputed buffer %s outside the backward pass", t, s.layer,
            bufs[id].name));
      }
    }
  }
  if (!plan.share) return absl::OkStatus();
  int64_t sum = 0;
  for (size_t a = 0; a < bufs.size(); ++a) {
    if (bufs[a].external) continue;
    sum += bufs[a].words();
    if (bufs[a].offset < 0 || bufs[a].offset + bufs[a].words() > plan.arena_elements) {
      return absl::InternalError("buffer " + bufs[a].name + " lies outside the arena");
    }
    for (size_t b = a + 1; b < bufs.size(); ++b) {
      if (bufs[b].external) continue;
      const bool same_memory = bufs[a].offset < bufs[b].offset + bufs[b].words() &&
                               bufs[b].offset < bufs[a].offset + bufs[a].words();
      if (same_memory && Overlap(bufs[a], bufs[b])) {
        return absl::InternalError(absl::StrFormat(
            "buffers %s [%d, %d] and %s [%d, %d] share memory while both are live", bufs[a].name,
            bufs[a].first, bufs[a].last, bufs[b].name, bufs[b].first, bufs[b].last));
      }
    }
  }
  // Alignment padding may add up to one alignment unit per buffer.
  if (plan.arena_elements > sum + 64 * static_cast<int64_t>(bufs.size())) {
    return absl::InternalError(
        absl::StrFormat("arena of %d words exceeds the buffers' sum %d", plan.arena_elements, sum));
  }
  return absl::OkStatus();
}

}  // namespace colonnade
