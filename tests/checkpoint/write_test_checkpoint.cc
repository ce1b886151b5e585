// write_test_checkpoint: writes a full checkpoint of a zoo model (default: AlexNet at 224
// with 1000 classes, about 490 MB with velocities) for tests/checkpoint/read_checkpoint.py,
// which reads it with h5py. Parameter shapes do not depend on the batch, so the net is
// built for one or two images.
//
//   write_test_checkpoint --dir=D [--model=alexnet] [--input_size=224] [--num_classes=1000]
//       [--columns=0] [--step=100] [--seed=7] [--no_velocity]
//       [--activations=PATH --fc_input=pool5 --fc_output=fc6]
//
// Velocities are set to exactly half the values (so a reader can tell that each velocity
// belongs to its parameter). With --activations, one forward pass in evaluation mode on
// two deterministic images is run and the blobs --fc_input (the input of the first fully
// connected layer, CHWN) and --fc_output (its output after the in-place ReLU, CHWN) are
// written to PATH as datasets of those names: read_checkpoint.py uses them to check the
// flattening order that docs/CHECKPOINTS.md states for porting weights to PyTorch.
// Prints the checkpoint path on stdout.
#include <hdf5.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "collect_whole.h"
#include "core/models.h"
#include "core/philox.h"

namespace {

using namespace colonnade;

bool Flag(const char* arg, const char* name, std::string* value) {
  const size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0 || arg[n] != '=') return false;
  *value = arg + n + 1;
  return true;
}

int Fail(const std::string& m) {
  std::fprintf(stderr, "write_test_checkpoint: error: %s\n", m.c_str());
  return 1;
}

bool WriteBlob(hid_t file, const char* name, const Tensor& t) {
  std::vector<hsize_t> dims(t.shape().dims().begin(), t.shape().dims().end());
  std::vector<float> v = t.ToHost();
  hid_t sp = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t d = H5Dcreate2(file, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  bool ok = d >= 0 && H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0;
  if (d >= 0) H5Dclose(d);
  H5Sclose(sp);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, model = "alexnet", activations, fc_input = "pool5", fc_output = "fc6";
  std::string input_size = "224", num_classes = "1000", columns = "0", step = "100", seed = "7";
  bool velocity = true;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (Flag(a, "--dir", &dir) || Flag(a, "--model", &model) ||
        Flag(a, "--input_size", &input_size) || Flag(a, "--num_classes", &num_classes) ||
        Flag(a, "--columns", &columns) || Flag(a, "--step", &step) || Flag(a, "--seed", &seed) ||
        Flag(a, "--activations", &activations) || Flag(a, "--fc_input", &fc_input) ||
        Flag(a, "--fc_output", &fc_output)) {
      continue;
    }
    if (std::strcmp(a, "--no_velocity") == 0) {
      velocity = false;
      continue;
    }
    return Fail(std::string("unknown argument ") + a);
  }
  if (dir.empty()) return Fail("--dir is required");

  ModelOptions o;
  o.input_size = std::atoi(input_size.c_str());
  o.num_classes = std::atoi(num_classes.c_str());
  o.columns = std::atoi(columns.c_str());
  absl::StatusOr<std::unique_ptr<Net>> built = BuildModel(model, o);
  if (!built.ok()) return Fail(std::string(built.status().message()));
  Net& net = **built;
  const int64_t batch = activations.empty() ? 1 : 2;
  // Read after Forward below: kept out of the memory plan's sharing.
  net.PinBlob(fc_input);
  net.PinBlob(fc_output);
  if (absl::Status s = net.Build(batch, Device::kCPU); !s.ok())
    return Fail(std::string(s.message()));
  const uint64_t seed_v = std::strtoull(seed.c_str(), nullptr, 10);
  net.InitParams(seed_v);

  if (!activations.empty()) {
    Tensor& x = net.blob("data");
    std::vector<float> v(x.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = PhiloxNormal(seed_v, 99, i);
    x.CopyFromHost(v);
    net.blob("label").Fill(0.0f);
    RunContext ctx;
    ctx.phase = Phase::kEval;
    net.Forward(ctx);
    if (!net.has_blob(fc_input) || !net.has_blob(fc_output)) {
      return Fail("no blob " + fc_input + " or " + fc_output + " in model " + model);
    }
    hid_t f = H5Fcreate(activations.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) return Fail("cannot create " + activations);
    bool ok = WriteBlob(f, "fc_input", net.blob(fc_input)) &&
              WriteBlob(f, "fc_output", net.blob(fc_output));
    if (H5Fclose(f) < 0 || !ok) return Fail("cannot write " + activations);
  }

  absl::StatusOr<std::vector<checkpoint::TensorEntry>> entries = checkpoint::CollectFromNet(net);
  if (!entries.ok()) return Fail(std::string(entries.status().message()));
  for (checkpoint::TensorEntry& e : *entries) {
    if (!velocity) {
      e.velocity.clear();
    } else if (e.learnable) {
      for (size_t i = 0; i < e.value.size(); ++i) e.velocity[i] = e.value[i] * 0.5f;
    }
  }
  checkpoint::TrainState st;
  st.step = std::atoll(step.c_str());
  st.epoch = 1;
  st.cursor_epoch = 1;
  st.cursor_position = 256;
  st.seed = seed_v;
  st.model = model;
  st.columns = net.columns();
  st.input_size = o.input_size > 0 ? o.input_size : 0;
  st.num_classes = o.num_classes;
  st.input_channels = o.input_channels;
  st.flags = "--model=" + model + "\n--input_size=" + input_size +
             "\n--num_classes=" + num_classes + "\n--seed=" + seed + "\n";
  std::string path;
  if (absl::Status s = checkpoint::Write(dir, st, *entries, 0, &path); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  std::printf("%s\n", path.c_str());
  return 0;
}
