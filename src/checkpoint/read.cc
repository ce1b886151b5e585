// Reading and validating checkpoints (checkpoint.h, Read and CheckCompatible): every
// attribute, every group's structure, every tensor's storage and checksum, and the model a
// file is read for, before a tensor's memory is allocated.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <iterator>
#include <map>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/internal.h"
#include "core/status_macros.h"
#include "hdf5/hdf5.h"

namespace colonnade::checkpoint {

using hdf5::Handle;
using hdf5::WithLastError;
constexpr hdf5::ObjectType kGroup = hdf5::ObjectType::kGroup;
constexpr hdf5::ObjectType kDataset = hdf5::ObjectType::kDataset;
using internal::Errno;
using internal::ShapeText;

namespace {

std::string BaseName(const std::string& path) {
  size_t p = path.find_last_of('/');
  return p == std::string::npos ? path : path.substr(p + 1);
}

absl::Status Corrupt(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrFormat("%s: %s", path, what));
}

// What the reader knows while it walks a file: its path and size, how many of its bytes
// the tensors read so far have claimed, and the model it is read for.
struct ReadContext {
  std::string path;
  int64_t file_bytes = 0;
  int64_t claimed_bytes = 0;  // 4 per element of every dataset inspected so far
  const ExpectedModel* expected = nullptr;
  bool model_mismatch = false;  // the error returned is "another model", not corruption

  // A sound checkpoint of another model: not corruption, and reported as CheckCompatible
  // reports it.
  absl::Status Mismatch(absl::Status s) {
    model_mismatch = true;
    return s;
  }
};

// Integer attribute `name` of `loc`, named `label` in messages, within [lo, hi].
absl::StatusOr<int64_t> ReadIntInRange(hdf5::Id loc, const std::string& path,
                                       const std::string& label, const char* name, int64_t lo,
                                       int64_t hi) {
  ASSIGN_OR_RETURN(int64_t v, hdf5::ReadIntAttr(loc, name, path, label));
  if (v < lo || v > hi) {
    return Corrupt(path,
                   absl::StrFormat("attribute %s = %d is out of range [%d, %d]", label, v, lo, hi));
  }
  return v;
}

// Checks a float32 dataset without allocating anything for its data: type, rank, shape
// (element count with overflow checks), storage (hdf5::CheckChecksummedChunks) and size: tensors
// are stored uncompressed, so all the tensors of a file together cannot claim more bytes
// than the file has. That bounds the memory a crafted shape can make the reader take (a
// (2^32, 2^32) shape once overflowed to 0 elements and crashed in the read). Returns the
// element count.
absl::StatusOr<int64_t> InspectFloatDataset(hdf5::Id d, ReadContext& ctx, const std::string& full,
                                            std::vector<int64_t>* shape) {
  const std::string& path = ctx.path;
  ASSIGN_OR_RETURN(std::vector<uint64_t> dims,
                   hdf5::ArrayExtents(d, hdf5::Dtype::kFloat32, path, full));
  shape->clear();
  std::vector<std::string> dims_text;  // an extent may exceed int64_t: print it as stored
  for (uint64_t x : dims) dims_text.push_back(absl::StrCat(x));
  const std::string shape_text =
      absl::StrCat("(", absl::StrJoin(dims_text, ", "), dims.size() == 1 ? ",)" : ")");
  for (uint64_t x : dims) {
    if (x < 1) return Corrupt(path, absl::StrFormat("%s has shape %s", full, shape_text));
  }
  int64_t bytes = 0;
  if (!hdf5::CheckedByteCount(dims, 4, &bytes)) {
    return Corrupt(
        path, absl::StrFormat("%s has shape %s: its size overflows 64 bits", full, shape_text));
  }
  for (uint64_t x : dims) shape->push_back(static_cast<int64_t>(x));
  if (bytes > ctx.file_bytes - ctx.claimed_bytes) {
    return Corrupt(
        path,
        absl::StrFormat(
            "%s has shape %s, %d bytes of float32, but the file is %d bytes long and the tensors "
            "before it take %d (tensors are stored uncompressed): crafted or corrupt",
            full, shape_text, bytes, ctx.file_bytes, ctx.claimed_bytes));
  }
  ctx.claimed_bytes += bytes;
  RETURN_IF_ERROR(hdf5::CheckChecksummedChunks(d, dims, path, full));
  return bytes / 4;
}

// Reads the `n` elements of a dataset InspectFloatDataset accepted, with every chunk's
// Fletcher-32 checksum verified, and checks that they are finite.
absl::Status ReadFloatData(hdf5::Id d, const ReadContext& ctx, const std::string& full, int64_t n,
                           std::vector<float>* values) {
  values->assign(static_cast<size_t>(n), 0.0f);
  RETURN_IF_ERROR(hdf5::ReadChecksummed(d, ctx.path, full, hdf5::Dtype::kFloat32, values->data()));
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite((*values)[i])) {
      return Corrupt(ctx.path, absl::StrFormat("%s holds a non-finite value (%g at index %d)", full,
                                               (*values)[i], i));
    }
  }
  return absl::OkStatus();
}

// Every root attribute of format version 1 (docs/CHECKPOINTS.md, section 2) but those of
// the strings' checksum, which files written before them lack.
constexpr const char* kRootAttributes[] = {"format_version",
                                           "step",
                                           "epoch",
                                           "cursor_epoch",
                                           "cursor_position",
                                           "seed",
                                           "rng",
                                           "model",
                                           "columns",
                                           "input_size",
                                           "num_classes",
                                           "input_channels",
                                           "flags",
                                           "num_params",
                                           "has_optimizer_state"};

// Opens `ctx.path` read-only after checking it is a regular file; sets ctx.file_bytes.
absl::StatusOr<Handle> OpenForRead(ReadContext& ctx) {
  const std::string& path = ctx.path;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    int e = errno;
    if (e == ENOENT) {
      return absl::NotFoundError(absl::StrFormat("%s: no such checkpoint file", path));
    }
    return absl::PermissionDeniedError(absl::StrFormat("%s: %s", path, Errno(e)));
  }
  if (!S_ISREG(st.st_mode)) return absl::FailedPreconditionError(path + ": not a regular file");
  ctx.file_bytes = static_cast<int64_t>(st.st_size);
  // Closing the file closes every object still open in it, even after an error.
  return hdf5::OpenFileReadOnlyStrongClose(path);
}

// Whether root attribute `name` exists; DataLoss when HDF5 cannot tell.
absl::StatusOr<bool> HasAttr(hdf5::Id root, const std::string& path, const char* name) {
  const int exists = hdf5::AttrExists(root, name);
  if (exists < 0) return Corrupt(path, WithLastError("cannot read the root group's attributes"));
  return exists > 0;
}

// The root attributes "format" and "format_version": is this a checkpoint we read? Then
// every other root attribute must be there, before any string is read (a missing string
// attribute would otherwise show as a failed string checksum, hdf5.h).
absl::StatusOr<int64_t> ReadFormat(hdf5::Id root, const std::string& path) {
  ASSIGN_OR_RETURN(bool has_format, HasAttr(root, path, "format"));
  if (!has_format) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: not a Colonnade checkpoint (no attribute /format)", path));
  }
  auto not_ours = [&path](const std::string& format) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: not a Colonnade checkpoint (attribute /format is '%s', expected '%s')",
                        path, format, kFormatName));
  };
  ASSIGN_OR_RETURN(bool has_version, HasAttr(root, path, "format_version"));
  if (!has_version) {  // another format's file (a shard?), or a checkpoint without it
    ASSIGN_OR_RETURN(std::string format, hdf5::ReadStringAttr(root, "format", path, "/format"));
    if (format != kFormatName) return not_ours(format);
  }
  for (const char* name : kRootAttributes) {
    ASSIGN_OR_RETURN(bool has, HasAttr(root, path, name));
    if (!has) return Corrupt(path, absl::StrFormat("attribute /%s is missing", name));
  }
  ASSIGN_OR_RETURN(std::string format, hdf5::ReadStringAttr(root, "format", path, "/format"));
  if (format != kFormatName) return not_ours(format);
  ASSIGN_OR_RETURN(int64_t version,
                   ReadIntInRange(root, path, "/format_version", "format_version", 0, INT64_MAX));
  if (version != kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: checkpoint format_version %d; this build reads version %d%s", path, version,
        kFormatVersion, version > kFormatVersion ? " (written by a newer Colonnade)" : ""));
  }
  return version;
}

// Every root attribute after the format, each in its range (internal::kIntAttrs): the
// TrainState, num_params and has_optimizer_state; the step against the file name; then
// against ctx.expected the model and input size (a mismatch) and the data cursor against
// the training data (corruption).
absl::Status ReadRootAttributes(hdf5::Id root, ReadContext& ctx, Checkpoint& c,
                                int64_t* num_params) {
  const std::string& path = ctx.path;
  TrainState& s = c.state;
  int64_t has_opt = 0;
  int64_t columns = 0, input_size = 0, num_classes = 0, input_channels = 0;
  int64_t* const out[] = {&s.step,     &s.epoch,     &s.cursor_epoch, &s.cursor_position, &columns,
                          &input_size, &num_classes, &input_channels, num_params,         &has_opt};
  static_assert(std::size(internal::kIntAttrs) == std::size(out));
  for (size_t i = 0; i < std::size(out); ++i) {
    const internal::IntAttrRange& r = internal::kIntAttrs[i];
    ASSIGN_OR_RETURN(*out[i],
                     ReadIntInRange(root, path, absl::StrCat("/", r.name), r.name, r.lo, r.hi));
  }
  s.columns = static_cast<int>(columns);  // each at most INT32_MAX (kIntAttrs)
  s.input_size = static_cast<int>(input_size);
  s.num_classes = static_cast<int>(num_classes);
  s.input_channels = static_cast<int>(input_channels);
  ASSIGN_OR_RETURN(s.seed, hdf5::ReadUintAttr(root, "seed", path, "/seed"));
  ASSIGN_OR_RETURN(s.model, hdf5::ReadStringAttr(root, "model", path, "/model"));
  ASSIGN_OR_RETURN(s.flags, hdf5::ReadStringAttr(root, "flags", path, "/flags"));
  RETURN_IF_ERROR(hdf5::ReadStringAttr(root, "rng", path, "/rng").status());
  if (s.model.empty()) return Corrupt(path, "attribute /model is empty");
  if (!internal::IsModelName(s.model)) {
    return Corrupt(path, absl::StrFormat("attribute /model = '%s' is not a model zoo name (%s)",
                                         absl::CHexEscape(s.model), internal::kModelNameRule));
  }
  c.has_optimizer_state = has_opt == 1;
  // has_ema is optional: files written before moving averages existed lack it (none).
  ASSIGN_OR_RETURN(bool has_ema_attr, HasAttr(root, path, "has_ema"));
  if (has_ema_attr) {
    ASSIGN_OR_RETURN(int64_t has_ema, ReadIntInRange(root, path, "/has_ema", "has_ema", 0, 1));
    c.has_ema = has_ema == 1;
  }
  const int64_t name_step = ParseCheckpointStep(BaseName(path));
  if (name_step >= 0 && name_step != s.step) {
    return Corrupt(path, absl::StrFormat("the file name says step %d but attribute /step is %d",
                                         name_step, s.step));
  }
  if (ctx.expected == nullptr) return absl::OkStatus();
  const ExpectedModel& want = *ctx.expected;
  if (s.model != want.model) {
    return ctx.Mismatch(absl::FailedPreconditionError(
        absl::StrFormat("%s: the checkpoint is of model %s, not %s", path, s.model, want.model)));
  }
  if (want.input_size > 0 && s.input_size != want.input_size) {
    return ctx.Mismatch(absl::FailedPreconditionError(absl::StrFormat(
        "%s: attribute /input_size is %d but the %s being built takes %dx%d inputs (from "
        "--input_size, --crop or the images): resume it with --input_size=%d (or the --crop "
        "it was trained with)",
        path, s.input_size, want.model, want.input_size, want.input_size, s.input_size)));
  }
  if (want.dataset_size >= 0 && s.cursor_position > want.dataset_size) {
    return Corrupt(path,
                   absl::StrFormat("attribute /cursor_position = %d lies beyond the end of the "
                                   "training data (%d images): the file is corrupt, or it was "
                                   "written for other data",
                                   s.cursor_position, want.dataset_size));
  }
  return absl::OkStatus();
}

// Root objects: /params, and /optimizer exactly when has_optimizer_state.
absl::Status CheckRootObjects(hdf5::Id root, const std::string& path, const Checkpoint& c) {
  ASSIGN_OR_RETURN(std::vector<std::string> top, hdf5::ListHardLinks(root, path, "/"));
  bool saw_params = false, saw_opt = false, saw_ema = false;
  for (const std::string& n : top) {
    if (n == "params") {
      saw_params = true;
    } else if (n == "optimizer") {
      saw_opt = true;
    } else if (n == "ema") {
      saw_ema = true;
    } else {
      return Corrupt(path, absl::StrFormat("unexpected object /%s", n));
    }
  }
  if (!saw_params) return Corrupt(path, "group /params is missing");
  if (saw_opt != c.has_optimizer_state) {
    return Corrupt(path, c.has_optimizer_state
                             ? "attribute /has_optimizer_state is 1 but group /optimizer is missing"
                             : "group /optimizer is present but /has_optimizer_state is 0");
  }
  if (saw_ema != c.has_ema) {
    return Corrupt(path, c.has_ema ? "attribute /has_ema is 1 but group /ema is missing"
                                   : "group /ema is present but /has_ema is 0 or absent");
  }
  return absl::OkStatus();
}

// The tensor's name and shape against the model the file is read for, before its data is
// read: CheckCompatible's rules and messages.
absl::Status CheckExpectedShape(ReadContext& ctx, const TensorEntry& e) {
  if (ctx.expected == nullptr) return absl::OkStatus();
  const ExpectedTensors& want = ctx.expected->tensors;
  auto it =
      std::find_if(want.begin(), want.end(), [&](const auto& x) { return x.first == e.name; });
  if (it == want.end()) {
    return ctx.Mismatch(absl::FailedPreconditionError(
        absl::StrFormat("%s: /params/%s %s is not a parameter of model %s", ctx.path, e.name,
                        ShapeText(e.shape), ctx.expected->model)));
  }
  if (it->second != e.shape) {
    return ctx.Mismatch(absl::FailedPreconditionError(
        absl::StrFormat("%s: /params/%s has shape %s but model %s expects %s", ctx.path, e.name,
                        ShapeText(e.shape), ctx.expected->model, ShapeText(it->second))));
  }
  return absl::OkStatus();
}

// Dataset /params/<layer>/<pn> into a new entry of `c`.
absl::Status ReadParam(hdf5::Id layer_group, const std::string& layer, const std::string& pn,
                       ReadContext& ctx, Checkpoint& c, std::map<std::string, size_t>& index) {
  const std::string full = "/params/" + layer + "/" + pn;
  ASSIGN_OR_RETURN(Handle d, hdf5::OpenObject(layer_group, pn, kDataset, ctx.path, full));
  TensorEntry e;
  e.name = layer + "/" + pn;
  ASSIGN_OR_RETURN(int64_t learnable,
                   ReadIntInRange(d.get(), ctx.path, full + "@learnable", "learnable", 0, 1));
  e.learnable = learnable == 1;
  ASSIGN_OR_RETURN(int64_t n, InspectFloatDataset(d.get(), ctx, full, &e.shape));
  RETURN_IF_ERROR(CheckExpectedShape(ctx, e));
  RETURN_IF_ERROR(ReadFloatData(d.get(), ctx, full, n, &e.value));
  index[e.name] = c.tensors.size();
  c.tensors.push_back(std::move(e));
  return absl::OkStatus();
}

// /params/<layer>/<param> in file order, each checked and read; then the count against
// /num_params and, with ctx.expected, the model's tensors that the file lacks.
absl::Status ReadParams(hdf5::Id root, ReadContext& ctx, int64_t num_params, Checkpoint& c,
                        std::map<std::string, size_t>& index) {
  const std::string& path = ctx.path;
  {
    ASSIGN_OR_RETURN(Handle params, hdf5::OpenObject(root, "params", kGroup, path, "/params"));
    ASSIGN_OR_RETURN(std::vector<std::string> layers,
                     hdf5::ListHardLinks(params.get(), path, "/params/"));
    for (const std::string& layer : layers) {
      const std::string lpath = "/params/" + layer;
      ASSIGN_OR_RETURN(Handle lg, hdf5::OpenObject(params.get(), layer, kGroup, path, lpath));
      ASSIGN_OR_RETURN(std::vector<std::string> names,
                       hdf5::ListHardLinks(lg.get(), path, lpath + "/"));
      if (names.empty()) return Corrupt(path, lpath + " is an empty group");
      for (const std::string& pn : names) {
        RETURN_IF_ERROR(ReadParam(lg.get(), layer, pn, ctx, c, index));
      }
    }
  }
  if (static_cast<int64_t>(c.tensors.size()) != num_params) {
    return Corrupt(path, absl::StrFormat("/params holds %d tensors but attribute /num_params is %d",
                                         c.tensors.size(), num_params));
  }
  if (ctx.expected != nullptr) {  // a tensor of the model that the file lacks
    if (auto cs = CheckCompatible(c, ctx.expected->tensors, ctx.expected->model); !cs.ok()) {
      return ctx.Mismatch(cs);
    }
  }
  return absl::OkStatus();
}

// /optimizer/<layer>/<pn>/velocity into the entry of <layer>/<pn>.
absl::Status ReadVelocity(hdf5::Id layer_group, const std::string& layer, const std::string& pn,
                          ReadContext& ctx, Checkpoint& c,
                          const std::map<std::string, size_t>& index) {
  const std::string& path = ctx.path;
  const std::string ppath = "/optimizer/" + layer + "/" + pn;
  auto it = index.find(layer + "/" + pn);
  if (it == index.end() || !c.tensors[it->second].learnable) {
    return Corrupt(
        path, absl::StrFormat("%s has no learnable parameter /params/%s/%s", ppath, layer, pn));
  }
  TensorEntry& e = c.tensors[it->second];
  ASSIGN_OR_RETURN(Handle pg, hdf5::OpenObject(layer_group, pn, kGroup, path, ppath));
  ASSIGN_OR_RETURN(std::vector<std::string> leaf, hdf5::ListHardLinks(pg.get(), path, ppath + "/"));
  if (leaf.size() != 1 || leaf[0] != "velocity") {
    return Corrupt(path, absl::StrFormat("%s must hold exactly one dataset, 'velocity'", ppath));
  }
  const std::string vpath = ppath + "/velocity";
  ASSIGN_OR_RETURN(Handle d, hdf5::OpenObject(pg.get(), "velocity", kDataset, path, vpath));
  std::vector<int64_t> vshape;
  ASSIGN_OR_RETURN(int64_t n, InspectFloatDataset(d.get(), ctx, vpath, &vshape));
  if (vshape != e.shape) {
    return Corrupt(path, absl::StrFormat("%s has shape %s but /params/%s has %s", vpath,
                                         ShapeText(vshape), e.name, ShapeText(e.shape)));
  }
  return ReadFloatData(d.get(), ctx, vpath, n, &e.velocity);
}

// /optimizer: a velocity for every learnable parameter and nothing else.
absl::Status ReadOptimizer(hdf5::Id root, ReadContext& ctx, Checkpoint& c,
                           const std::map<std::string, size_t>& index) {
  const std::string& path = ctx.path;
  ASSIGN_OR_RETURN(Handle opt, hdf5::OpenObject(root, "optimizer", kGroup, path, "/optimizer"));
  ASSIGN_OR_RETURN(std::vector<std::string> layers,
                   hdf5::ListHardLinks(opt.get(), path, "/optimizer/"));
  for (const std::string& layer : layers) {
    const std::string lpath = "/optimizer/" + layer;
    ASSIGN_OR_RETURN(Handle lg, hdf5::OpenObject(opt.get(), layer, kGroup, path, lpath));
    ASSIGN_OR_RETURN(std::vector<std::string> pnames,
                     hdf5::ListHardLinks(lg.get(), path, lpath + "/"));
    for (const std::string& pn : pnames) {
      RETURN_IF_ERROR(ReadVelocity(lg.get(), layer, pn, ctx, c, index));
    }
  }
  for (const TensorEntry& e : c.tensors) {
    if (e.learnable && e.velocity.empty()) {
      return Corrupt(path, absl::StrFormat("/optimizer/%s/velocity is missing", e.name));
    }
  }
  return absl::OkStatus();
}

// /ema/<layer>/<pn> for every parameter /params/<layer>/<pn>, of its shape, and nothing else.
absl::Status ReadEma(hdf5::Id root, ReadContext& ctx, Checkpoint& c,
                     const std::map<std::string, size_t>& index) {
  const std::string& path = ctx.path;
  ASSIGN_OR_RETURN(Handle ema, hdf5::OpenObject(root, "ema", kGroup, path, "/ema"));
  ASSIGN_OR_RETURN(std::vector<std::string> layers, hdf5::ListHardLinks(ema.get(), path, "/ema/"));
  for (const std::string& layer : layers) {
    const std::string lpath = "/ema/" + layer;
    ASSIGN_OR_RETURN(Handle lg, hdf5::OpenObject(ema.get(), layer, kGroup, path, lpath));
    ASSIGN_OR_RETURN(std::vector<std::string> pnames,
                     hdf5::ListHardLinks(lg.get(), path, lpath + "/"));
    for (const std::string& pn : pnames) {
      const std::string epath = lpath + "/" + pn;
      auto it = index.find(layer + "/" + pn);
      if (it == index.end()) {
        return Corrupt(path,
                       absl::StrFormat("%s has no parameter /params/%s/%s", epath, layer, pn));
      }
      TensorEntry& e = c.tensors[it->second];
      ASSIGN_OR_RETURN(Handle d, hdf5::OpenObject(lg.get(), pn, kDataset, path, epath));
      std::vector<int64_t> eshape;
      ASSIGN_OR_RETURN(int64_t n, InspectFloatDataset(d.get(), ctx, epath, &eshape));
      if (eshape != e.shape) {
        return Corrupt(path, absl::StrFormat("%s has shape %s but /params/%s has %s", epath,
                                             ShapeText(eshape), e.name, ShapeText(e.shape)));
      }
      RETURN_IF_ERROR(ReadFloatData(d.get(), ctx, epath, n, &e.ema));
    }
  }
  for (const TensorEntry& e : c.tensors) {
    if (e.ema.empty()) return Corrupt(path, absl::StrFormat("/ema/%s is missing", e.name));
  }
  return absl::OkStatus();
}

// The whole file, in the order of the checks described in checkpoint.h (Read).
absl::StatusOr<Checkpoint> ReadFile(ReadContext& ctx) {
  ASSIGN_OR_RETURN(Handle file, OpenForRead(ctx));
  const hdf5::Id root = file.get();
  Checkpoint c;
  c.path = ctx.path;
  ASSIGN_OR_RETURN(c.format_version, ReadFormat(root, ctx.path));
  int64_t num_params = 0;
  RETURN_IF_ERROR(ReadRootAttributes(root, ctx, c, &num_params));
  RETURN_IF_ERROR(CheckRootObjects(root, ctx.path, c));
  std::map<std::string, size_t> index;  // entry name -> position in c.tensors
  RETURN_IF_ERROR(ReadParams(root, ctx, num_params, c, index));
  if (c.has_optimizer_state) RETURN_IF_ERROR(ReadOptimizer(root, ctx, c, index));
  if (c.has_ema) RETURN_IF_ERROR(ReadEma(root, ctx, c, index));
  return c;
}

}  // namespace

namespace internal {

std::string OutOfRange(const IntAttrRange& r, int64_t v) {
  if (v >= r.lo && v <= r.hi) return "";
  return absl::StrFormat("%s = %d is out of range [%d, %d]", r.name, v, r.lo, r.hi);
}

bool IsModelName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-'))) return false;
  }
  return true;
}

absl::StatusOr<Checkpoint> ReadChecked(const std::string& path, const ExpectedModel* expected,
                                       bool* model_mismatch) {
  ReadContext ctx;
  ctx.path = path;
  ctx.expected = expected;
  absl::StatusOr<Checkpoint> c;
  {
    hdf5::Scope scope;
    c = ReadFile(ctx);
  }
  if (model_mismatch) *model_mismatch = ctx.model_mismatch;
  return c;
}

}  // namespace internal

absl::StatusOr<Checkpoint> Read(const std::string& path, const ExpectedModel* expected) {
  return internal::ReadChecked(path, expected, nullptr);
}

absl::StatusOr<TrainState> ReadState(const std::string& path) {
  ReadContext ctx;
  ctx.path = path;
  hdf5::Scope scope;
  ASSIGN_OR_RETURN(Handle file, OpenForRead(ctx));
  Checkpoint c;
  c.path = path;
  ASSIGN_OR_RETURN(c.format_version, ReadFormat(file.get(), path));
  int64_t num_params = 0;
  RETURN_IF_ERROR(ReadRootAttributes(file.get(), ctx, c, &num_params));
  return c.state;
}

const TensorEntry* Checkpoint::Find(const std::string& name) const {
  for (const TensorEntry& e : tensors) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

absl::Status CheckCompatible(const Checkpoint& ckpt, const ExpectedTensors& expected,
                             const std::string& model) {
  const std::string& f = ckpt.path;
  if (ckpt.state.model != model) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: the checkpoint is of model %s, not %s", f, ckpt.state.model, model));
  }
  std::set<std::string> wanted;
  for (const auto& [name, shape] : expected) {
    wanted.insert(name);
    const TensorEntry* e = ckpt.Find(name);
    if (e == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s: /params/%s is missing but model %s has it with shape %s", f, name,
                          model, ShapeText(shape)));
    }
    if (e->shape != shape) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s: /params/%s has shape %s but model %s expects %s", f, name,
                          ShapeText(e->shape), model, ShapeText(shape)));
    }
  }
  for (const TensorEntry& e : ckpt.tensors) {
    if (!wanted.count(e.name)) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s: /params/%s %s is not a parameter of model %s", f, e.name,
                          ShapeText(e.shape), model));
    }
  }
  return absl::OkStatus();
}

}  // namespace colonnade::checkpoint
