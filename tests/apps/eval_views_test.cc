// --eval_views (src/apps/evaluation.cc, docs/DATA.md "Ten crops") end to end: the
// trainer's ten-view and two-view metrics and predictions against a direct computation on
// the same checkpoint: data::TenCrops of the eval pipeline's full images, or its centre crop
// (resized with --eval_crop_fraction) and data::MirrorCHWN of it, Net::Forward of each view,
// the softmax outputs averaged. And --eval_views=1 is the centre crop, as before the flag
// existed.
//
// The trainer runs as a user runs it (the binary of COLONNADE_BUILD_DIR) on the CPU: it
// trains cifar10-80sec for 3 steps on 37x37 synthetic shards with 32x32 crops (an odd
// margin, so the centre rounds down), evaluating with ten views at the end, then
// evaluates and predicts from the checkpoint. The last eval batch is partial (37 = 16 +
// 16 + 5).

#include <hdf5.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint.h"
#include "core/models.h"
#include "core/tensor.h"
#include "data/augment.h"
#include "data/dataset.h"
#include "data/pipeline.h"
#include "gtest/gtest.h"

namespace colonnade {
namespace {

constexpr int kBatch = 16, kCrop = 32;
constexpr char kModel[] = "cifar10-80sec";

std::string BuildDir() {
  const char* b = std::getenv("COLONNADE_BUILD_DIR");
  return b != nullptr ? b : ".";
}

struct Process {
  int code = -1;
  std::string output;  // stdout and stderr
};

Process Execute(const std::string& command) {
  Process r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, got);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The trainer with the flags every run here shares.
std::string Trainer(const std::string& flags) {
  return absl::StrCat(BuildDir(), "/trainer --model=", kModel, " --device=cpu --crop=", kCrop,
                      " --batch_size=", kBatch, " ", flags);
}

// A predictions file: /logits [N][K] (here kept as read), /labels, attribute eval_views.
struct Predictions {
  std::vector<float> logits;  // N x K
  std::vector<int32_t> labels;
  int64_t eval_views = 0;
};

Predictions ReadPredictions(const std::string& path) {
  Predictions p;
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return p;
  auto read = [&](const char* name, hid_t type, auto* out) {
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    hid_t space = H5Dget_space(d);
    out->resize(static_cast<size_t>(H5Sget_simple_extent_npoints(space)));
    H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out->data());
    H5Sclose(space);
    H5Dclose(d);
  };
  read("logits", H5T_NATIVE_FLOAT, &p.logits);
  read("labels", H5T_NATIVE_INT32, &p.labels);
  if (H5Aexists(f, "eval_views") > 0) {
    hid_t a = H5Aopen(f, "eval_views", H5P_DEFAULT);
    H5Aread(a, H5T_NATIVE_INT64, &p.eval_views);
    H5Aclose(a);
  }
  H5Fclose(f);
  return p;
}

// The direct computation on a checkpoint, image by image in dataset order.
struct Reference {
  int64_t classes = 0;
  std::vector<int> labels;
  std::vector<std::vector<float>> centre_logits;    // per image: view 0 (the centre crop)
  std::vector<std::vector<double>> mean_probs;      // per image: the views' average
  double loss = 0, top1_error = 0, top5_error = 0;  // of the average
};

// Rank of the true class among K scores (0 = top), ties broken by the class index as the
// trainer's CountCorrect does.
int RankOf(const std::vector<double>& p, int label) {
  int better = 0;
  for (size_t c = 0; c < p.size(); ++c) {
    if (p[c] > p[label] || (p[c] == p[label] && static_cast<int>(c) < label)) ++better;
  }
  return better;
}

// `views` 10: TenCrops of the full images; 2: the centre crop (the centre square of
// `fraction` of the image resized, when > 0) and its mirror.
Reference Compute(const std::string& checkpoint_path, const std::string& val_dir, int views = 10,
                  double fraction = 0) {
  Reference ref;
  absl::StatusOr<const ModelInfo*> info = FindModel(kModel);
  EXPECT_TRUE(info.ok());
  auto ds = data::OpenDataset(val_dir);
  EXPECT_TRUE(ds.ok()) << ds.status();
  ModelOptions mo;
  mo.input_size = kCrop;
  mo.num_classes = (*ds)->info().num_classes;
  mo.input_channels = (*ds)->info().channels;
  auto net = BuildModel(kModel, mo);
  EXPECT_TRUE(net.ok()) << net.status();
  EXPECT_TRUE((*net)->Build(kBatch, Device::kCPU).ok());
  auto ckpt = checkpoint::Read(checkpoint_path);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_TRUE(checkpoint::LoadIntoNet(*ckpt, **net).ok());

  data::PipelineOptions o;  // the eval pipeline: full images, or the centre crop for two views
  o.global_batch = kBatch;
  o.train = false;
  o.epochs = 1;
  o.crop = views == 10 ? 0 : kCrop;
  o.eval_crop_fraction = fraction;
  o.mean = "image";
  o.scale = (*info)->recipe.input_scale;
  auto pipe = data::BatchPipeline::Create(ds->get(), o);
  EXPECT_TRUE(pipe.ok()) << pipe.status();
  RunContext ctx;
  ctx.phase = Phase::kEval;
  double loss = 0, top1 = 0, top5 = 0;
  for (int64_t b = 0; b < (*pipe)->batches_per_epoch(); ++b) {
    absl::StatusOr<data::Batch> batch = (*pipe)->Next();
    EXPECT_TRUE(batch.ok());
    const int64_t n = batch->images.n();
    Net& m = **net;
    if (m.batch() != n) EXPECT_TRUE(m.Build(n, Device::kCPU).ok());
    absl::StatusOr<std::vector<Tensor>> crops;
    if (views == 10) {
      crops = data::TenCrops(batch->images, kCrop);
    } else {
      absl::StatusOr<Tensor> mirrored = data::MirrorCHWN(batch->images);
      EXPECT_TRUE(mirrored.ok());
      crops = std::vector<Tensor>{batch->images, *mirrored};
    }
    EXPECT_TRUE(crops.ok());
    const std::vector<float> labels = batch->labels.ToHost();
    m.blob("label").CopyFrom(batch->labels);
    const int64_t k = m.blob("probs").c();
    ref.classes = k;
    std::vector<std::vector<double>> mean(n, std::vector<double>(k, 0.0));
    std::vector<std::vector<float>> centre(n, std::vector<float>(k));
    for (int v = 0; v < views; ++v) {
      m.blob("data").CopyFrom((*crops)[v]);
      m.Forward(ctx);
      const std::vector<float> probs = m.blob("probs").ToHost();
      const std::vector<float> logits = m.blob(kLogitsBlob).ToHost();
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t c = 0; c < k; ++c) {
          mean[j][c] += probs[c * n + j] / views;
          if (v == 0) centre[j][c] = logits[c * n + j];
        }
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      const int label = static_cast<int>(labels[j]);
      ref.labels.push_back(label);
      loss += -std::log(mean[j][label]);
      const int rank = RankOf(mean[j], label);
      top1 += rank == 0;
      top5 += rank < 5;
      ref.mean_probs.push_back(mean[j]);
      ref.centre_logits.push_back(centre[j]);
    }
  }
  const double images = static_cast<double>(ref.labels.size());
  ref.loss = loss / images;
  ref.top1_error = 1.0 - top1 / images;
  ref.top5_error = 1.0 - top5 / images;
  return ref;
}

// "loss 2.2806  top1-err 0.8108  top5-err 0.2973" of an eval line.
struct EvalLine {
  bool found = false;
  double loss = 0, top1 = 0, top5 = 0;
};

EvalLine ParseEvalLine(const std::string& text, const std::string& prefix) {
  std::smatch m;
  EvalLine e;
  const std::regex re(prefix + R"(.*loss ([0-9.]+)  top1-err ([0-9.]+)  top5-err ([0-9.]+))");
  if (std::regex_search(text, m, re)) {
    e.found = true;
    e.loss = std::stod(m[1]);
    e.top1 = std::stod(m[2]);
    e.top5 = std::stod(m[3]);
  }
  return e;
}

class EvalViewsTest : public ::testing::Test {
 protected:
  // Shards, a 3-step training with ten-view evaluation, and its checkpoint.
  static void SetUpTestSuite() {
    work_ = new std::string(absl::StrCat(::testing::TempDir(), "eval_views_", getpid()));
    Execute("rm -rf " + *work_);
    Process ms =
        Execute(absl::StrCat(BuildDir(), "/make_shards --source=synthetic --output=", *work_,
                             "/ds --size=96 --test_size=37 --height=37 --width=37 "
                             "--progress=false"));
    ASSERT_EQ(ms.code, 0) << ms.output;
    train_ = new Process(Execute(Trainer(
        absl::StrCat("--data=", *work_, "/ds/train --val_data=", *work_,
                     "/ds/test --steps=3 --log_every=3 ", "--eval_views=10 --metrics_file=", *work_,
                     "/metrics.jsonl --checkpoint_dir=", *work_, "/ck"))));
    ASSERT_EQ(train_->code, 0) << train_->output;
  }
  static void TearDownTestSuite() {
    Execute("rm -rf " + *work_);
    delete work_;
    delete train_;
  }
  static std::string Work() { return *work_; }
  static std::string Checkpoint() { return *work_ + "/ck/ckpt-000000003.h5"; }
  static std::string Val() { return *work_ + "/ds/test"; }
  // --mode=predict from the checkpoint into FILE with `flags`.
  static Predictions Predict(const std::string& file, const std::string& flags) {
    Process r = Execute(
        Trainer(absl::StrCat("--mode=predict --val_data=", Val(), " --resume=", Checkpoint(),
                             " --predictions=", Work(), "/", file, " ", flags)));
    EXPECT_EQ(r.code, 0) << r.output;
    return ReadPredictions(Work() + "/" + file);
  }
  static Process Eval(const std::string& flags) {
    return Execute(Trainer(
        absl::StrCat("--mode=eval --val_data=", Val(), " --resume=", Checkpoint(), " ", flags)));
  }

  static std::string* work_;
  static Process* train_;
};
std::string* EvalViewsTest::work_ = nullptr;
Process* EvalViewsTest::train_ = nullptr;

// Ten views: the evaluation during training (metrics record), --mode=eval (its line) and
// --mode=predict (ln of the average in /logits) are the average of the ten views'
// probabilities of TenCrops + Net::Forward on the same checkpoint.
TEST_F(EvalViewsTest, TenViewsAverageTheSoftmaxOfTenCrops) {
  const Reference ref = Compute(Checkpoint(), Val());
  ASSERT_EQ(ref.labels.size(), 37u);
  // Not vacuous: the average is not the centre crop's prediction.
  double most = 0;
  for (size_t j = 0; j < ref.labels.size(); ++j) {
    double z = 0;  // centre crop softmax denominator
    for (float l : ref.centre_logits[j]) z += std::exp(static_cast<double>(l));
    for (int64_t c = 0; c < ref.classes; ++c) {
      most = std::max(most, std::abs(std::exp(ref.centre_logits[j][c]) / z - ref.mean_probs[j][c]));
    }
  }
  EXPECT_GT(most, 1e-4)
      << "the ten views agree with the centre crop: the test cannot tell them apart";

  const Predictions p = Predict("p10.h5", "--eval_views=10");
  EXPECT_EQ(p.eval_views, 10);
  ASSERT_EQ(p.logits.size(), ref.labels.size() * ref.classes);
  for (size_t j = 0; j < ref.labels.size(); ++j) {
    EXPECT_EQ(p.labels[j], ref.labels[j]);
    for (int64_t c = 0; c < ref.classes; ++c) {
      const double want = ref.mean_probs[j][c];
      EXPECT_NEAR(std::exp(static_cast<double>(p.logits[j * ref.classes + c])), want,
                  1e-6 + 1e-5 * want)
          << "image " << j << " class " << c;
    }
  }

  const Process eval = Eval("--eval_views=10");
  ASSERT_EQ(eval.code, 0) << eval.output;
  const EvalLine e = ParseEvalLine(eval.output, "37 images \\(10 views averaged\\)");
  ASSERT_TRUE(e.found) << eval.output;
  EXPECT_NEAR(e.loss, ref.loss, 6e-5);
  EXPECT_NEAR(e.top1, ref.top1_error, 6e-5);
  EXPECT_NEAR(e.top5, ref.top5_error, 6e-5);

  // The evaluation at the end of training ran on the same weights (step 3).
  std::ifstream metrics(Work() + "/metrics.jsonl");
  std::string line, last_eval;
  while (std::getline(metrics, line)) {
    if (line.find("\"kind\":\"eval\"") != std::string::npos) last_eval = line;
  }
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      last_eval, m,
      std::regex(R"("step":3,.*"loss":([0-9.]+),"top1_error":([0-9.]+),"top5_error":([0-9.]+),)"
                 R"("images":37,"views":10)")))
      << last_eval;
  EXPECT_NEAR(std::stod(m[1]), ref.loss, 2e-6);
  EXPECT_NEAR(std::stod(m[2]), ref.top1_error, 1e-5);
  EXPECT_NEAR(std::stod(m[3]), ref.top5_error, 1e-5);
  EXPECT_NE(train_->output.find("37 images (10 views averaged)"), std::string::npos)
      << train_->output;
}

// Two views (--eval_views=2, test-time flips): the average of the centre crop's and its
// mirror's probabilities, the centre crop plain or resized from the centre square of
// --eval_crop_fraction (0.75 of 37: 28 pixels, resized to 32), in --mode=predict's /logits
// and --mode=eval's line.
TEST_F(EvalViewsTest, TwoViewsAverageTheCentreCropAndItsMirror) {
  for (double fraction : {0.0, 0.75}) {
    SCOPED_TRACE(absl::StrFormat("--eval_crop_fraction=%g", fraction));
    const std::string flags = absl::StrFormat("--eval_views=2 --eval_crop_fraction=%g", fraction);
    const Reference ref = Compute(Checkpoint(), Val(), 2, fraction);
    const Reference ten = Compute(Checkpoint(), Val(), 10);
    ASSERT_EQ(ref.labels.size(), 37u);
    double most = 0;  // not vacuous: two views are not ten
    for (size_t j = 0; j < ref.labels.size(); ++j) {
      for (int64_t c = 0; c < ref.classes; ++c) {
        most = std::max(most, std::abs(ref.mean_probs[j][c] - ten.mean_probs[j][c]));
      }
    }
    EXPECT_GT(most, 1e-4);
    const Predictions p = Predict(absl::StrFormat("p2_%g.h5", fraction), flags);
    EXPECT_EQ(p.eval_views, 2);
    ASSERT_EQ(p.logits.size(), ref.labels.size() * ref.classes);
    for (size_t j = 0; j < ref.labels.size(); ++j) {
      EXPECT_EQ(p.labels[j], ref.labels[j]);
      for (int64_t c = 0; c < ref.classes; ++c) {
        const double want = ref.mean_probs[j][c];
        EXPECT_NEAR(std::exp(static_cast<double>(p.logits[j * ref.classes + c])), want,
                    1e-6 + 1e-5 * want)
            << "image " << j << " class " << c;
      }
    }
    const Process eval = Eval(flags);
    ASSERT_EQ(eval.code, 0) << eval.output;
    const EvalLine e = ParseEvalLine(eval.output, "37 images \\(2 views averaged\\)");
    ASSERT_TRUE(e.found) << eval.output;
    EXPECT_NEAR(e.loss, ref.loss, 6e-5);
    EXPECT_NEAR(e.top1, ref.top1_error, 6e-5);
    EXPECT_NEAR(e.top5, ref.top5_error, 6e-5);
  }
}

// One view (the default, or said explicitly) is the centre crop: the logits of TenCrops'
// view 0, and the eval line of a run without the flag.
TEST_F(EvalViewsTest, OneViewIsTheCentreCrop) {
  const Reference ref = Compute(Checkpoint(), Val());
  const Predictions plain = Predict("p.h5", "");
  const Predictions one = Predict("p1.h5", "--eval_views=1");
  EXPECT_EQ(plain.eval_views, 1);
  EXPECT_EQ(one.eval_views, 1);
  ASSERT_EQ(one.logits.size(), ref.labels.size() * ref.classes);
  EXPECT_EQ(plain.logits, one.logits);
  for (size_t j = 0; j < ref.labels.size(); ++j) {
    for (int64_t c = 0; c < ref.classes; ++c) {
      EXPECT_NEAR(one.logits[j * ref.classes + c], ref.centre_logits[j][c], 1e-5)
          << "image " << j << " class " << c;
    }
  }
  const Process a = Eval(""), b = Eval("--eval_views=1");
  ASSERT_EQ(a.code, 0) << a.output;
  ASSERT_EQ(b.code, 0) << b.output;
  const EvalLine ea = ParseEvalLine(a.output, "37 images  ");
  const EvalLine eb = ParseEvalLine(b.output, "37 images  ");
  ASSERT_TRUE(ea.found && eb.found) << a.output << b.output;
  EXPECT_EQ(ea.loss, eb.loss);
  EXPECT_EQ(ea.top1, eb.top1);
  EXPECT_EQ(ea.top5, eb.top5);
}

// A value outside 1 | 2 | 10, and ten crops larger than the validation images, are usage
// errors (exit 2) with a message that says why, before anything trains.
TEST_F(EvalViewsTest, RefusesBadValuesAndCropsThatDoNotFit) {
  const Process three = Execute(Trainer("--data=synthetic --steps=1 --eval_views=3"));
  EXPECT_EQ(three.code, 2) << three.output;
  EXPECT_TRUE(std::regex_search(three.output,
                                std::regex("bad value '3' for --eval_views: .*must be 1, 2 or 10")))
      << three.output;

  Process ms = Execute(absl::StrCat(BuildDir(), "/make_shards --source=synthetic --output=", Work(),
                                    "/small --size=16 --test_size=16 --height=24 --width=24 "
                                    "--progress=false"));
  ASSERT_EQ(ms.code, 0) << ms.output;
  const Process small =
      Execute(Trainer(absl::StrCat("--data=", Work(), "/ds/train --val_data=", Work(),
                                   "/small/test --steps=1 --eval_views=10")));
  EXPECT_EQ(small.code, 2) << small.output;
  EXPECT_NE(small.output.find("--eval_views=10 cuts crops of 32x32 (the model's input) from the "
                              "full images, but the images of"),
            std::string::npos)
      << small.output;
  EXPECT_EQ(small.output.find("step "), std::string::npos) << "it trained: " << small.output;
}

}  // namespace
}  // namespace colonnade
