#include "apps/prediction.h"

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "apps/evaluation.h"
#include "apps/exit_codes.h"
#include "apps/output_file.h"
#include "core/models.h"
#include "core/status_macros.h"
#include "hdf5/hdf5.h"

namespace colonnade {
namespace {

// Writes predictions.h5: /logits float32 [N][classes] and /labels int32 [N], in dataset
// order, and the attribute eval_views (1, 2 or 10: with 2 or 10 /logits is ln of the views'
// mean probabilities), through a unique temporary file renamed into place (WriteOutputFile). Runs
// in the project's HDF5 scope: the data pipeline's reader threads may still be reading shards.
absl::Status WritePredictions(const TrainConfig& cfg, const std::vector<float>& logits,
                              const std::vector<int32_t>& labels, int64_t classes) {
  hdf5::Scope scope;
  return WriteOutputFile(
      cfg.predictions, "--predictions", PredictionsRule(cfg),
      [&](const std::string& tmp) -> absl::Status {
        absl::StatusOr<hdf5::Handle> file = hdf5::CreateFile(tmp);
        if (!file.ok()) {
          return absl::InternalError(
              absl::StrCat("cannot create ", tmp, ": ", file.status().message()));
        }
        const int64_t n = static_cast<int64_t>(labels.size());
        absl::Status s = hdf5::WriteDataset(file->get(), "logits", "logits", hdf5::Dtype::kFloat32,
                                            {n, classes}, logits.data());
        if (s.ok()) {
          s = hdf5::WriteDataset(file->get(), "labels", "labels", hdf5::Dtype::kInt32, {n},
                                 labels.data());
        }
        if (s.ok()) {
          s = hdf5::WriteIntAttr(file->get(), "eval_views", static_cast<int>(cfg.eval_views));
        }
        if (!file->Close() || !s.ok()) {
          return absl::InternalError(absl::StrCat("writing --predictions file ", cfg.predictions,
                                                  " failed", s.ok() ? "" : ": ", s.message()));
        }
        return absl::OkStatus();
      });
}

// The logits and labels of every image, gathered batch by batch in dp-rank order (which
// is dataset order) on the group's writer, world rank 0.
class PredictionGather {
 public:
  PredictionGather(const Layout& l, int64_t classes)
      : l_(l), classes_(classes), dp_(l.dp_size > 1 ? l.dp_comm : MPI_COMM_SELF) {}

  // `kn`: this rank's K x n logits (empty when n == 0). Collective over the dp group.
  void Add(const std::vector<float>& kn, const std::vector<float>& labels_f, int64_t n) {
    std::vector<float> logits_t(kn.size());  // this rank's [n][K]
    for (int64_t c = 0; c < (n > 0 ? classes_ : 0); ++c)
      for (int64_t j = 0; j < n; ++j) logits_t[j * classes_ + c] = kn[c * n + j];
    int count = static_cast<int>(n);
    std::vector<int> counts(l_.dp_size), displs(l_.dp_size);
    MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, dp_);
    int total = 0;
    for (int r = 0; r < l_.dp_size; ++r) {
      displs[r] = total;
      total += counts[r];
    }
    std::vector<float> lab(total);
    MPI_Gatherv(labels_f.data(), count, MPI_FLOAT, lab.data(), counts.data(), displs.data(),
                MPI_FLOAT, 0, dp_);
    for (int r = 0; r < l_.dp_size; ++r) {
      counts[r] *= classes_;
      displs[r] *= classes_;
    }
    std::vector<float> lg(static_cast<size_t>(total) * classes_);
    MPI_Gatherv(logits_t.data(), count * static_cast<int>(classes_), MPI_FLOAT, lg.data(),
                counts.data(), displs.data(), MPI_FLOAT, 0, dp_);
    if (writer()) {
      logits_.insert(logits_.end(), lg.begin(), lg.end());
      for (float v : lab) labels_.push_back(static_cast<int32_t>(v));
    }
  }

  bool writer() const { return l_.mp_rank == 0 && l_.dp_rank == 0; }
  const std::vector<float>& logits() const { return logits_; }
  const std::vector<int32_t>& labels() const { return labels_; }

 private:
  const Layout& l_;
  const int64_t classes_;
  const MPI_Comm dp_;
  std::vector<float> logits_;
  std::vector<int32_t> labels_;
};

// The views' "logits" for --predictions: ln pbar in float (softmax gives pbar back; -inf
// where every view's probability of a class underflowed to 0).
std::vector<float> LogOf(const std::vector<double>& mean_probs) {
  std::vector<float> out(mean_probs.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(std::log(mean_probs[i]));
  return out;
}

}  // namespace

// --mode=predict: the logits of every image on --val_data, written to --predictions (with
// several views: the log of their average probabilities).
int RunPredict(Job& job, const std::string& checkpoint_path) {
  Net& net = job.net();
  // The classifier's logits (replicated on every mp rank by the column split).
  const std::string logits_blob = kLogitsBlob;
  PredictionGather gather(job.l, net.blob(logits_blob).c());
  absl::Status s = ForEachEvalBatch(
      net, *job.data, EvalPipelineOptions(job), job.local_batch, EvalSpecOf(job),
      ProgressOf(job, "predict"), [&](const data::Batch& batch, int64_t n, const ViewAverage* avg) {
        std::vector<float> kn, labels;
        if (n > 0) {
          kn = avg != nullptr ? LogOf(avg->MeanProbs()) : net.blob(logits_blob).ToHost();
          labels = batch.labels.ToHost();
        }
        gather.Add(kn, labels, n);
        return absl::OkStatus();
      });
  if (!s.ok()) RankError(job.l, s);
  if (gather.writer()) {
    s = WritePredictions(job.cfg, gather.logits(), gather.labels(), net.blob(logits_blob).c());
  }
  int ok = s.ok() ? 1 : 0;
  MPI_Bcast(&ok, 1, MPI_INT, 0, job.mesh->world_comm());
  if (!ok) return AgreedError(job.l, s, kExitError);
  if (job.lead) {
    std::printf("predict %s on %s: wrote %s of %zu images to %s\n", checkpoint_path.c_str(),
                job.data->info().path.c_str(),
                job.cfg.eval_views == EvalViews::kOne
                    ? "logits"
                    : absl::StrFormat("the log of the %d-view average probabilities as logits",
                                      static_cast<int>(job.cfg.eval_views))
                          .c_str(),
                gather.labels().size(), job.cfg.predictions.c_str());
  }
  return kExitOk;
}

}  // namespace colonnade
