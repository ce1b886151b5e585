// The write path of checkpoints: validate the entries, write a temporary file, make it
// durable and rename it into place (checkpoint.h, Write). The keep policy that follows is
// the directory's business (directory.cc).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <iterator>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/internal.h"
#include "core/paths.h"
#include "core/status_macros.h"
#include "hdf5/hdf5.h"

namespace colonnade::checkpoint {

using hdf5::Handle;
using internal::Errno;
using internal::ShapeText;

namespace {

// Chunks hold whole rows (dim 0 slices) and at most this many bytes; Fletcher-32 needs a
// chunked layout, and a chunk must stay under HDF5's 4 GiB limit.
constexpr int64_t kChunkBytes = 16 << 20;
// What the root attribute "rng" says (see checkpoint.h).
constexpr char kRngNote[] =
    "philox4x32-10, counter-based: every random stream is a pure function of (seed, "
    "purpose, step, index); seed and step are the complete RNG state";

bool SplitName(const std::string& name, std::string* layer, std::string* param) {
  size_t slash = name.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == name.size()) return false;
  if (name.find('/', slash + 1) != std::string::npos) return false;
  *layer = name.substr(0, slash);
  *param = name.substr(slash + 1);
  return *layer != "." && *layer != ".." && *param != "." && *param != "..";
}

absl::Status FsyncPath(const std::string& path, bool directory) {
  int fd = open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrFormat("cannot open %s to fsync it: %s", path, Errno(errno)));
  }
  int rc = fsync(fd);
  int e = errno;
  close(fd);
  if (rc != 0) return absl::InternalError(absl::StrFormat("fsync %s failed: %s", path, Errno(e)));
  return absl::OkStatus();
}

// ---- validation --------------------------------------------------------------------------

absl::Status NotWritten(const std::string& why) {
  return absl::InvalidArgumentError("checkpoint not written: " + why);
}

// What Read would refuse is never written: a trainer could not resume from it.
absl::Status ValidateState(const TrainState& state) {
  if (state.step < 0) return NotWritten(absl::StrCat("step ", state.step, " is negative"));
  if (state.model.empty()) return NotWritten("the model name is empty");
  if (!internal::IsModelName(state.model)) {
    return NotWritten(absl::StrFormat("model name '%s' is not a model zoo name (%s)",
                                      absl::CHexEscape(state.model), internal::kModelNameRule));
  }
  // internal::kIntAttrs' order; num_params and has_optimizer_state follow from the entries.
  const int64_t values[] = {
      state.step,    state.epoch,      state.cursor_epoch, state.cursor_position,
      state.columns, state.input_size, state.num_classes,  state.input_channels};
  for (size_t i = 0; i < std::size(values); ++i) {
    if (std::string why = internal::OutOfRange(internal::kIntAttrs[i], values[i]); !why.empty()) {
      return NotWritten(why);
    }
  }
  return absl::OkStatus();
}

// One entry on its own: name, shape, value and velocity counts, finiteness, chunk size.
absl::Status ValidateEntry(const TensorEntry& e) {
  std::string layer, param;
  if (!SplitName(e.name, &layer, &param)) {
    return NotWritten(
        absl::StrFormat("tensor name '%s' is not of the form <layer>/<param>", e.name));
  }
  if (e.shape.empty() || e.shape.size() > 32) {
    return NotWritten(absl::StrFormat("%s has rank %d (1 to 32 allowed)", e.name, e.shape.size()));
  }
  int64_t n = 1;
  for (int64_t d : e.shape) {
    if (d < 1) return NotWritten(absl::StrFormat("%s has shape %s", e.name, ShapeText(e.shape)));
    n *= d;
  }
  if (static_cast<int64_t>(e.value.size()) != n) {
    return NotWritten(absl::StrFormat("%s has shape %s (%d elements) but %d values", e.name,
                                      ShapeText(e.shape), n, e.value.size()));
  }
  if (!e.velocity.empty() && static_cast<int64_t>(e.velocity.size()) != n) {
    return NotWritten(
        absl::StrFormat("%s has %d values but %d velocity values", e.name, n, e.velocity.size()));
  }
  if (!e.learnable && !e.velocity.empty()) {
    return NotWritten(absl::StrFormat("%s is not learnable but has a velocity", e.name));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(e.value[i])) {
      return NotWritten(
          absl::StrFormat("%s holds a non-finite value (%g at index %d); a "
                          "checkpoint never stores a diverged model",
                          e.name, e.value[i], i));
    }
  }
  if (!e.ema.empty() && static_cast<int64_t>(e.ema.size()) != n) {
    return NotWritten(
        absl::StrFormat("%s has %d values but %d moving-average values", e.name, n, e.ema.size()));
  }
  for (size_t i = 0; i < e.ema.size(); ++i) {
    if (!std::isfinite(e.ema[i])) {
      return NotWritten(absl::StrFormat("%s holds a non-finite moving average (%g at index %d)",
                                        e.name, e.ema[i], i));
    }
  }
  for (size_t i = 0; i < e.velocity.size(); ++i) {
    if (!std::isfinite(e.velocity[i])) {
      return NotWritten(absl::StrFormat("%s holds a non-finite velocity (%g at index %d)", e.name,
                                        e.velocity[i], i));
    }
  }
  // A chunk holds at least one row; keep it under HDF5's 4 GiB chunk limit.
  if (static_cast<double>(n / e.shape[0]) * 4 >= 4294967295.0) {
    return NotWritten(absl::StrFormat("%s: one row along dim 0 exceeds 4 GiB", e.name));
  }
  return absl::OkStatus();
}

absl::Status ValidateForWrite(const TrainState& state, const std::vector<TensorEntry>& entries,
                              bool* has_velocity) {
  RETURN_IF_ERROR(ValidateState(state));
  if (entries.empty()) return NotWritten("no tensors");
  std::set<std::string> names;
  int learnable = 0, with_velocity = 0;
  for (const TensorEntry& e : entries) {
    // The name's form first, then duplicates, then the rest: the order of the messages.
    std::string layer, param;
    if (SplitName(e.name, &layer, &param) && !names.insert(e.name).second) {
      return NotWritten(absl::StrFormat("tensor %s appears twice", e.name));
    }
    RETURN_IF_ERROR(ValidateEntry(e));
    if (e.learnable) {
      ++learnable;
      if (!e.velocity.empty()) ++with_velocity;
    }
  }
  if (with_velocity != 0 && with_velocity != learnable) {
    return NotWritten(absl::StrFormat(
        "%d of %d learnable tensors have a velocity: give all or none", with_velocity, learnable));
  }
  *has_velocity = with_velocity > 0;
  size_t with_ema = 0;
  for (const TensorEntry& e : entries) with_ema += e.ema.empty() ? 0 : 1;
  if (with_ema != 0 && with_ema != entries.size()) {
    return NotWritten(absl::StrFormat("%d of %d tensors have a moving average: give all or none",
                                      with_ema, entries.size()));
  }
  return absl::OkStatus();
}

// Whether the entries carry moving averages (ValidateForWrite: all or none).
bool EntriesHaveEma(const std::vector<TensorEntry>& entries) {
  return !entries.empty() && !entries[0].ema.empty();
}

// ---- the file ----------------------------------------------------------------------------

absl::Status WriteError(const std::string& path, const std::string& what) {
  return absl::InternalError(absl::StrFormat("writing checkpoint %s: %s", path, what));
}

absl::Status InFile(const std::string& path, const absl::Status& s) {
  return s.ok() ? s : WriteError(path, std::string(s.message()));
}

// Groups remember the creation order of their links (so Read returns tensors in the Net's
// order) and carry no timestamps (identical inputs give identical files).
absl::StatusOr<Handle> OpenOrCreateGroup(hdf5::Id loc, const std::string& name,
                                         const std::string& path) {
  absl::StatusOr<Handle> g = hdf5::OpenOrCreateGroup(loc, name);
  if (!g.ok()) return InFile(path, g.status());
  return g;
}

// A float32 tensor, chunked with a Fletcher-32 checksum on every chunk; `learnable` (0 or
// 1) becomes its attribute, -1 writes none (velocities).
absl::Status WriteTensor(hdf5::Id loc, const std::string& path, const std::string& where,
                         const std::string& name, const std::vector<int64_t>& shape,
                         const std::vector<float>& data, int learnable) {
  hdf5::WriteOptions o;
  o.checksummed_chunk_bytes = kChunkBytes;
  if (learnable >= 0) o.int_attrs.push_back({"learnable", learnable});
  return InFile(path, hdf5::WriteDataset(loc, name.c_str(), where, hdf5::Dtype::kFloat32, shape,
                                         data.data(), o));
}

// The root attributes, in the order of checkpoint.h's layout.
absl::Status WriteRootAttributes(hdf5::Id root, const std::string& path, const TrainState& st,
                                 size_t num_params, bool has_velocity, bool has_ema) {
  const std::pair<const char*, int64_t> ints_before_seed[] = {
      {"format_version", kFormatVersion},
      {"step", st.step},
      {"epoch", st.epoch},
      {"cursor_epoch", st.cursor_epoch},
      {"cursor_position", st.cursor_position}};
  const std::pair<const char*, int64_t> ints_after_model[] = {
      {"columns", st.columns},
      {"input_size", st.input_size},
      {"num_classes", st.num_classes},
      {"input_channels", st.input_channels}};
  RETURN_IF_ERROR(InFile(path, hdf5::WriteStringAttr(root, "format", kFormatName)));
  for (const auto& [name, v] : ints_before_seed) {
    RETURN_IF_ERROR(InFile(path, hdf5::WriteIntAttr(root, name, v)));
  }
  RETURN_IF_ERROR(InFile(path, hdf5::WriteUintAttr(root, "seed", st.seed)));
  RETURN_IF_ERROR(InFile(path, hdf5::WriteStringAttr(root, "rng", kRngNote)));
  RETURN_IF_ERROR(InFile(path, hdf5::WriteStringAttr(root, "model", st.model)));
  for (const auto& [name, v] : ints_after_model) {
    RETURN_IF_ERROR(InFile(path, hdf5::WriteIntAttr(root, name, v)));
  }
  RETURN_IF_ERROR(InFile(path, hdf5::WriteStringAttr(root, "flags", st.flags)));
  RETURN_IF_ERROR(
      InFile(path, hdf5::WriteIntAttr(root, "num_params", static_cast<int64_t>(num_params))));
  RETURN_IF_ERROR(
      InFile(path, hdf5::WriteIntAttr(root, "has_optimizer_state", has_velocity ? 1 : 0)));
  // Only when there is one: a file without moving averages is the same as before they existed.
  if (has_ema) RETURN_IF_ERROR(InFile(path, hdf5::WriteIntAttr(root, "has_ema", 1)));
  return absl::OkStatus();
}

// /params/<layer>/<param>, then /optimizer/<layer>/<param>/velocity when `has_velocity`, then
// /ema/<layer>/<param> when the entries have moving averages.
absl::Status WriteTensors(hdf5::Id root, const std::string& path,
                          const std::vector<TensorEntry>& entries, bool has_velocity) {
  ASSIGN_OR_RETURN(Handle params, OpenOrCreateGroup(root, "params", path));
  for (const TensorEntry& e : entries) {
    std::string layer, param;
    SplitName(e.name, &layer, &param);
    ASSIGN_OR_RETURN(Handle g, OpenOrCreateGroup(params.get(), layer, path));
    RETURN_IF_ERROR(WriteTensor(g.get(), path, "/params/" + e.name, param, e.shape, e.value,
                                e.learnable ? 1 : 0));
  }
  if (has_velocity) {
    ASSIGN_OR_RETURN(Handle opt, OpenOrCreateGroup(root, "optimizer", path));
    for (const TensorEntry& e : entries) {
      if (!e.learnable) continue;
      std::string layer, param;
      SplitName(e.name, &layer, &param);
      ASSIGN_OR_RETURN(Handle lg, OpenOrCreateGroup(opt.get(), layer, path));
      ASSIGN_OR_RETURN(Handle pg, OpenOrCreateGroup(lg.get(), param, path));
      RETURN_IF_ERROR(WriteTensor(pg.get(), path, "/optimizer/" + e.name + "/velocity", "velocity",
                                  e.shape, e.velocity, -1));
    }
    opt.Close();
  }
  if (EntriesHaveEma(entries)) {
    ASSIGN_OR_RETURN(Handle ema, OpenOrCreateGroup(root, "ema", path));
    for (const TensorEntry& e : entries) {
      std::string layer, param;
      SplitName(e.name, &layer, &param);
      ASSIGN_OR_RETURN(Handle lg, OpenOrCreateGroup(ema.get(), layer, path));
      RETURN_IF_ERROR(WriteTensor(lg.get(), path, "/ema/" + e.name, param, e.shape, e.ema, -1));
    }
    ema.Close();
  }
  params.Close();
  return absl::OkStatus();
}

absl::Status WriteFile(const std::string& path, const TrainState& st,
                       const std::vector<TensorEntry>& entries, bool has_velocity) {
  // The 1.10 format checksums all file metadata (superblock v3, object headers v2 with the
  // attributes, chunk indexes); Fletcher-32 covers the data. Readable by HDF5 >= 1.10.
  hdf5::FileOptions options;
  options.exclusive = true;
  options.format_v110 = true;
  options.link_creation_order = true;
  absl::StatusOr<Handle> created = hdf5::CreateFile(path, options);
  if (!created.ok()) return InFile(path, created.status());
  Handle file = *std::move(created);
  RETURN_IF_ERROR(WriteRootAttributes(file.get(), path, st, entries.size(), has_velocity,
                                      EntriesHaveEma(entries)));
  RETURN_IF_ERROR(WriteTensors(file.get(), path, entries, has_velocity));
  RETURN_IF_ERROR(InFile(path, hdf5::Flush(file.get())));
  if (!file.Close()) return WriteError(path, hdf5::WithLastError("closing the file"));
  return absl::OkStatus();
}

}  // namespace

absl::Status Write(const std::string& dir, const TrainState& state,
                   const std::vector<TensorEntry>& entries, int keep_last,
                   std::string* written_path, std::vector<std::string>* warnings,
                   const DirectoryLock* lock) {
  bool has_velocity = false;
  RETURN_IF_ERROR(ValidateForWrite(state, entries, &has_velocity));
  const std::string d = dir.empty() ? "." : dir;
  RETURN_IF_ERROR(MakeDirs(d, "checkpoint directory"));
  const std::string final_path = JoinPath(d, CheckpointFileName(state.step));
  // Temporaries carry host and pid, so that a writer can tell its own from another job's.
  const std::string own_suffix = absl::StrCat(".", lock ? lock->owner() : ProcessTag(), ".tmp");
  const std::string tmp_path = final_path + own_suffix;
  unlink(tmp_path.c_str());  // a leftover of an earlier process with our host and pid
  absl::Status s;
  {
    hdf5::Scope scope;
    s = WriteFile(tmp_path, state, entries, has_velocity);
  }
  if (s.ok()) s = FsyncPath(tmp_path, false);
  if (s.ok() && rename(tmp_path.c_str(), final_path.c_str()) != 0) {
    s = absl::InternalError(
        absl::StrFormat("renaming %s to %s failed: %s", tmp_path, final_path, Errno(errno)));
  }
  if (!s.ok()) {
    unlink(tmp_path.c_str());
    return s;
  }
  RETURN_IF_ERROR(FsyncPath(d, true));
  if (written_path) *written_path = final_path;
  // Another process's temporary may be its write in progress, unless we hold the
  // directory's lock: then no other writer is active and it is a dead holder's leftover.
  const bool clean_others = lock != nullptr && lock->held() && lock->dir() == d;
  internal::ApplyKeepPolicy(d, state.step, keep_last, own_suffix, clean_others, warnings);
  return absl::OkStatus();
}

}  // namespace colonnade::checkpoint
