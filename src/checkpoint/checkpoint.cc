// Checkpoint file format: write (atomic), read (validated), find the newest valid one,
// compatibility checks. The layout is documented in checkpoint.h and docs/CHECKPOINTS.md.
#include "checkpoint/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "checkpoint/h5.h"
#include "checkpoint/signals.h"

namespace colonnade::checkpoint {

using internal::H5Scope;
using internal::Handle;
using internal::LastError;

namespace {

// Chunks hold whole rows (dim 0 slices) and at most this many bytes; Fletcher-32 needs a
// chunked layout, and a chunk must stay under HDF5's 4 GiB limit.
constexpr int64_t kChunkBytes = 16 << 20;
// What the root attribute "rng" says (see checkpoint.h).
constexpr char kRngNote[] =
    "philox4x32-10, counter-based: every random stream is a pure function of (seed, "
    "purpose, step, index); seed and step are the complete RNG state";

std::string Errno(int e) { return std::strerror(e); }

std::string WithDetail(const std::string& what) {
  std::string d = LastError();
  return d.empty() ? what : absl::StrCat(what, " (", d, ")");
}

std::string ShapeText(const std::vector<int64_t>& s) {
  if (s.size() == 1) return absl::StrCat("(", s[0], ",)");
  return absl::StrCat("(", absl::StrJoin(s, ", "), ")");
}

std::string BaseName(const std::string& path) {
  size_t p = path.find_last_of('/');
  return p == std::string::npos ? path : path.substr(p + 1);
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

bool SplitName(const std::string& name, std::string* layer, std::string* param) {
  size_t slash = name.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == name.size()) return false;
  if (name.find('/', slash + 1) != std::string::npos) return false;
  *layer = name.substr(0, slash);
  *param = name.substr(slash + 1);
  return *layer != "." && *layer != ".." && *param != "." && *param != "..";
}

absl::Status MakeDirs(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    size_t next = dir.find('/', pos + 1);
    cur = dir.substr(0, next);
    pos = next;
    if (cur.empty() || cur == "/") continue;
    if (mkdir(cur.c_str(), 0777) != 0 && errno != EEXIST) {
      return absl::PermissionDeniedError(
          absl::StrFormat("cannot create checkpoint directory %s: %s", cur, Errno(errno)));
    }
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrFormat("checkpoint directory %s is not a directory", dir));
  }
  return absl::OkStatus();
}

absl::Status FsyncPath(const std::string& path, bool directory) {
  int fd = open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) {
    return absl::InternalError(absl::StrFormat("cannot open %s to fsync it: %s", path, Errno(errno)));
  }
  int rc = fsync(fd);
  int e = errno;
  close(fd);
  if (rc != 0) return absl::InternalError(absl::StrFormat("fsync %s failed: %s", path, Errno(e)));
  return absl::OkStatus();
}

// Names of the entries of `dir` (no "." / ".."). Fails with NotFound when dir is missing.
absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    int e = errno;
    if (e == ENOENT) return absl::NotFoundError(absl::StrFormat("%s does not exist", dir));
    return absl::PermissionDeniedError(absl::StrFormat("cannot list %s: %s", dir, Errno(e)));
  }
  std::vector<std::string> out;
  while (struct dirent* ent = readdir(d)) {
    std::string n = ent->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

bool IsPartialName(const std::string& n) {
  return n.rfind("ckpt-", 0) == 0 && n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0;
}

// ---- the directory lock ----------------------------------------------------------------------

// "host H pid P [slurm job J] since 2025-01-31T12:00:00Z": what the lock file says.
std::string HolderText() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
  std::string text = absl::StrFormat("host %s pid %d", host, static_cast<int>(getpid()));
  if (const char* job = std::getenv("SLURM_JOB_ID"); job != nullptr && *job != '\0') {
    absl::StrAppend(&text, " slurm job ", job);
  }
  char when[32] = {0};
  const std::time_t now = std::time(nullptr);
  struct tm utc;
  if (gmtime_r(&now, &utc) != nullptr) {
    std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &utc);
  }
  absl::StrAppend(&text, " since ", when);
  return text;
}

// The holder recorded in an open lock file, or "an unknown process" (it may not have
// written its line yet).
std::string ReadHolder(int fd) {
  char buf[512];
  const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  std::string text(buf, n > 0 ? static_cast<size_t>(n) : 0);
  text = std::string(absl::StripAsciiWhitespace(text.substr(0, text.find('\n'))));
  return text.empty() ? "an unknown process" : text;
}

// ---- writing -------------------------------------------------------------------------------

absl::Status WriteError(const std::string& path, const std::string& what) {
  return absl::InternalError(absl::StrFormat("writing checkpoint %s: %s", path, WithDetail(what)));
}

absl::Status WriteIntAttr(hid_t loc, const std::string& path, const char* name, int64_t v) {
  Handle space = internal::Space(H5Screate(H5S_SCALAR));
  Handle a = internal::Attr(H5Acreate2(loc, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a.valid() || H5Awrite(a.get(), H5T_NATIVE_INT64, &v) < 0) {
    return WriteError(path, absl::StrCat("attribute ", name));
  }
  return absl::OkStatus();
}

absl::Status WriteUintAttr(hid_t loc, const std::string& path, const char* name, uint64_t v) {
  Handle space = internal::Space(H5Screate(H5S_SCALAR));
  Handle a = internal::Attr(H5Acreate2(loc, name, H5T_STD_U64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a.valid() || H5Awrite(a.get(), H5T_NATIVE_UINT64, &v) < 0) {
    return WriteError(path, absl::StrCat("attribute ", name));
  }
  return absl::OkStatus();
}

// Fixed-length UTF-8 strings: they live in the (checksummed) object header, where a
// variable-length string would live in the global heap, which has no checksum. h5py
// returns them as bytes (.decode() them).
absl::Status WriteStringAttr(hid_t loc, const std::string& path, const char* name,
                             const std::string& v) {
  Handle type = internal::Type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), std::max<size_t>(1, v.size()));
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Handle space = internal::Space(H5Screate(H5S_SCALAR));
  Handle a = internal::Attr(H5Acreate2(loc, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  std::string buf = v.empty() ? std::string(1, '\0') : v;
  if (!a.valid() || H5Awrite(a.get(), type.get(), buf.data()) < 0) {
    return WriteError(path, absl::StrCat("attribute ", name));
  }
  return absl::OkStatus();
}

// Group-creation properties: remember link creation order (so Read returns tensors in
// the Net's order) and no timestamps (identical inputs give identical files).
Handle GroupCreatePlist() {
  Handle gcpl = internal::Plist(H5Pcreate(H5P_GROUP_CREATE));
  H5Pset_link_creation_order(gcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
  H5Pset_obj_track_times(gcpl.get(), 0);
  return gcpl;
}

absl::StatusOr<Handle> OpenOrCreateGroup(hid_t loc, const std::string& name,
                                         const std::string& path) {
  htri_t exists = H5Lexists(loc, name.c_str(), H5P_DEFAULT);
  if (exists > 0) {
    Handle g = internal::Group(H5Gopen2(loc, name.c_str(), H5P_DEFAULT));
    if (!g.valid()) return WriteError(path, "opening group " + name);
    return g;
  }
  Handle gcpl = GroupCreatePlist();
  Handle g = internal::Group(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT));
  if (!g.valid()) return WriteError(path, "creating group " + name);
  return g;
}

absl::Status WriteFloatDataset(hid_t loc, const std::string& path, const std::string& where,
                               const std::string& name, const std::vector<int64_t>& shape,
                               const std::vector<float>& data, int learnable /* -1: none */) {
  const int rank = static_cast<int>(shape.size());
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  int64_t row = 1;
  for (int i = 1; i < rank; ++i) row *= shape[i];
  const int64_t rows_per_chunk =
      std::max<int64_t>(1, std::min<int64_t>(shape[0], kChunkBytes / (row * 4)));
  std::vector<hsize_t> chunk = dims;
  chunk[0] = static_cast<hsize_t>(rows_per_chunk);
  Handle dcpl = internal::Plist(H5Pcreate(H5P_DATASET_CREATE));
  if (H5Pset_chunk(dcpl.get(), rank, chunk.data()) < 0 || H5Pset_fletcher32(dcpl.get()) < 0) {
    return WriteError(path, where + ": chunk/checksum settings");
  }
  H5Pset_obj_track_times(dcpl.get(), 0);
  H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);  // every element is written below
  Handle space = internal::Space(H5Screate_simple(rank, dims.data(), nullptr));
  Handle d = internal::Dataset(H5Dcreate2(loc, name.c_str(), H5T_IEEE_F32LE, space.get(),
                                          H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
  if (!d.valid()) return WriteError(path, "creating dataset " + where);
  if (H5Dwrite(d.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()) < 0) {
    return WriteError(path, "writing dataset " + where);
  }
  if (learnable >= 0) {
    if (auto s = WriteIntAttr(d.get(), path, "learnable", learnable); !s.ok()) return s;
  }
  if (!d.Close()) return WriteError(path, "closing dataset " + where);
  return absl::OkStatus();
}

absl::Status ValidateForWrite(const TrainState& state, const std::vector<TensorEntry>& entries,
                              bool* has_velocity) {
  auto bad = [](const std::string& m) { return absl::InvalidArgumentError("checkpoint not written: " + m); };
  if (state.step < 0) return bad(absl::StrCat("step ", state.step, " is negative"));
  if (state.epoch < 0 || state.cursor_epoch < 0 || state.cursor_position < 0) {
    return bad("epoch and data cursor must be non-negative");
  }
  if (state.model.empty()) return bad("the model name is empty");
  if (state.columns < 0 || state.input_size < 0 || state.num_classes < 0 || state.input_channels < 0) {
    return bad("columns, input_size, num_classes and input_channels must be non-negative");
  }
  if (entries.empty()) return bad("no tensors");
  std::set<std::string> names;
  int learnable = 0, with_velocity = 0;
  for (const TensorEntry& e : entries) {
    std::string layer, param;
    if (!SplitName(e.name, &layer, &param)) {
      return bad(absl::StrFormat("tensor name '%s' is not of the form <layer>/<param>", e.name));
    }
    if (!names.insert(e.name).second) return bad(absl::StrFormat("tensor %s appears twice", e.name));
    if (e.shape.empty() || e.shape.size() > 32) {
      return bad(absl::StrFormat("%s has rank %d (1 to 32 allowed)", e.name, e.shape.size()));
    }
    int64_t n = 1;
    for (int64_t d : e.shape) {
      if (d < 1) return bad(absl::StrFormat("%s has shape %s", e.name, ShapeText(e.shape)));
      n *= d;
    }
    if (static_cast<int64_t>(e.value.size()) != n) {
      return bad(absl::StrFormat("%s has shape %s (%d elements) but %d values", e.name,
                                 ShapeText(e.shape), n, e.value.size()));
    }
    if (!e.velocity.empty() && static_cast<int64_t>(e.velocity.size()) != n) {
      return bad(absl::StrFormat("%s has %d values but %d velocity values", e.name, n,
                                 e.velocity.size()));
    }
    if (!e.learnable && !e.velocity.empty()) {
      return bad(absl::StrFormat("%s is not learnable but has a velocity", e.name));
    }
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(e.value[i])) {
        return bad(absl::StrFormat("%s holds a non-finite value (%g at index %d); a checkpoint "
                                   "never stores a diverged model",
                                   e.name, e.value[i], i));
      }
    }
    for (size_t i = 0; i < e.velocity.size(); ++i) {
      if (!std::isfinite(e.velocity[i])) {
        return bad(absl::StrFormat("%s holds a non-finite velocity (%g at index %d)", e.name,
                                   e.velocity[i], i));
      }
    }
    // A chunk holds at least one row; keep it under HDF5's 4 GiB chunk limit.
    if (static_cast<double>(n / e.shape[0]) * 4 >= 4294967295.0) {
      return bad(absl::StrFormat("%s: one row along dim 0 exceeds 4 GiB", e.name));
    }
    if (e.learnable) {
      ++learnable;
      if (!e.velocity.empty()) ++with_velocity;
    }
  }
  if (with_velocity != 0 && with_velocity != learnable) {
    return bad(absl::StrFormat("%d of %d learnable tensors have a velocity: give all or none",
                               with_velocity, learnable));
  }
  *has_velocity = with_velocity > 0;
  return absl::OkStatus();
}

absl::Status WriteFile(const std::string& path, const TrainState& st,
                       const std::vector<TensorEntry>& entries, bool has_velocity) {
  Handle fapl = internal::Plist(H5Pcreate(H5P_FILE_ACCESS));
  // The 1.10 format checksums all file metadata (superblock v3, object headers v2 with the
  // attributes, chunk indexes); Fletcher-32 covers the data. Readable by HDF5 >= 1.10.
  if (H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_V110) < 0) {
    return WriteError(path, "file format bounds");
  }
  Handle fcpl = internal::Plist(H5Pcreate(H5P_FILE_CREATE));
  H5Pset_link_creation_order(fcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
  H5Pset_obj_track_times(fcpl.get(), 0);
  Handle file = internal::File(H5Fcreate(path.c_str(), H5F_ACC_EXCL, fcpl.get(), fapl.get()));
  if (!file.valid()) return WriteError(path, "creating the file");
  const hid_t root = file.get();

  absl::Status s;
  auto attr_int = [&](const char* n, int64_t v) {
    if (s.ok()) s = WriteIntAttr(root, path, n, v);
  };
  auto attr_str = [&](const char* n, const std::string& v) {
    if (s.ok()) s = WriteStringAttr(root, path, n, v);
  };
  attr_str("format", kFormatName);
  attr_int("format_version", kFormatVersion);
  attr_int("step", st.step);
  attr_int("epoch", st.epoch);
  attr_int("cursor_epoch", st.cursor_epoch);
  attr_int("cursor_position", st.cursor_position);
  if (s.ok()) s = WriteUintAttr(root, path, "seed", st.seed);
  attr_str("rng", kRngNote);
  attr_str("model", st.model);
  attr_int("columns", st.columns);
  attr_int("input_size", st.input_size);
  attr_int("num_classes", st.num_classes);
  attr_int("input_channels", st.input_channels);
  attr_str("flags", st.flags);
  attr_int("num_params", static_cast<int64_t>(entries.size()));
  attr_int("has_optimizer_state", has_velocity ? 1 : 0);
  if (!s.ok()) return s;

  absl::StatusOr<Handle> params = OpenOrCreateGroup(root, "params", path);
  if (!params.ok()) return params.status();
  for (const TensorEntry& e : entries) {
    std::string layer, param;
    SplitName(e.name, &layer, &param);
    absl::StatusOr<Handle> g = OpenOrCreateGroup(params->get(), layer, path);
    if (!g.ok()) return g.status();
    if (auto ws = WriteFloatDataset(g->get(), path, "/params/" + e.name, param, e.shape, e.value,
                                    e.learnable ? 1 : 0);
        !ws.ok()) {
      return ws;
    }
  }
  if (has_velocity) {
    absl::StatusOr<Handle> opt = OpenOrCreateGroup(root, "optimizer", path);
    if (!opt.ok()) return opt.status();
    for (const TensorEntry& e : entries) {
      if (!e.learnable) continue;
      std::string layer, param;
      SplitName(e.name, &layer, &param);
      absl::StatusOr<Handle> lg = OpenOrCreateGroup(opt->get(), layer, path);
      if (!lg.ok()) return lg.status();
      absl::StatusOr<Handle> pg = OpenOrCreateGroup(lg->get(), param, path);
      if (!pg.ok()) return pg.status();
      if (auto ws = WriteFloatDataset(pg->get(), path, "/optimizer/" + e.name + "/velocity",
                                      "velocity", e.shape, e.velocity, -1);
          !ws.ok()) {
        return ws;
      }
    }
    opt->Close();
  }
  params->Close();
  if (H5Fflush(root, H5F_SCOPE_GLOBAL) < 0) return WriteError(path, "flushing the file");
  if (!file.Close()) return WriteError(path, "closing the file");
  return absl::OkStatus();
}

// ---- reading -------------------------------------------------------------------------------

absl::Status Corrupt(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrFormat("%s: %s", path, what));
}

absl::StatusOr<Handle> OpenAttr(hid_t loc, const std::string& path, const std::string& where,
                                const char* name, H5T_class_t cls) {
  htri_t exists = H5Aexists(loc, name);
  if (exists < 0) {
    return Corrupt(path, WithDetail(absl::StrFormat("cannot look up attribute %s%s", where, name)));
  }
  if (exists == 0) return Corrupt(path, absl::StrFormat("attribute %s%s is missing", where, name));
  Handle a = internal::Attr(H5Aopen(loc, name, H5P_DEFAULT));
  if (!a.valid()) return Corrupt(path, WithDetail(absl::StrFormat("cannot open attribute %s%s", where, name)));
  Handle t = internal::Type(H5Aget_type(a.get()));
  Handle sp = internal::Space(H5Aget_space(a.get()));
  if (!t.valid() || H5Tget_class(t.get()) != cls) {
    return Corrupt(path, absl::StrFormat("attribute %s%s has type %s, expected %s", where, name,
                                         t.valid() && H5Tget_class(t.get()) == H5T_STRING ? "string"
                                         : t.valid() && H5Tget_class(t.get()) == H5T_FLOAT ? "float"
                                         : t.valid() && H5Tget_class(t.get()) == H5T_INTEGER ? "integer"
                                                                                          : "other",
                                         cls == H5T_STRING ? "string" : "integer"));
  }
  if (!sp.valid() || H5Sget_simple_extent_npoints(sp.get()) != 1) {
    return Corrupt(path, absl::StrFormat("attribute %s%s is not a single value", where, name));
  }
  return a;
}

absl::StatusOr<int64_t> ReadIntAttr(hid_t loc, const std::string& path, const std::string& where,
                                    const char* name, int64_t lo, int64_t hi) {
  absl::StatusOr<Handle> a = OpenAttr(loc, path, where, name, H5T_INTEGER);
  if (!a.ok()) return a.status();
  int64_t v = 0;
  if (H5Aread(a->get(), H5T_NATIVE_INT64, &v) < 0) {
    return Corrupt(path, WithDetail(absl::StrFormat("cannot read attribute %s%s", where, name)));
  }
  if (v < lo || v > hi) {
    return Corrupt(path, absl::StrFormat("attribute %s%s = %d is out of range [%d, %d]", where, name,
                                         v, lo, hi));
  }
  return v;
}

absl::StatusOr<uint64_t> ReadUintAttr(hid_t loc, const std::string& path, const char* name) {
  absl::StatusOr<Handle> a = OpenAttr(loc, path, "/", name, H5T_INTEGER);
  if (!a.ok()) return a.status();
  uint64_t v = 0;
  if (H5Aread(a->get(), H5T_NATIVE_UINT64, &v) < 0) {
    return Corrupt(path, WithDetail(absl::StrFormat("cannot read attribute /%s", name)));
  }
  return v;
}

// `max_bytes` (the file's size) bounds what a crafted type size can make us allocate.
absl::StatusOr<std::string> ReadStringAttr(hid_t loc, const std::string& path, const char* name,
                                           int64_t max_bytes) {
  absl::StatusOr<Handle> a = OpenAttr(loc, path, "/", name, H5T_STRING);
  if (!a.ok()) return a.status();
  Handle t = internal::Type(H5Aget_type(a->get()));
  if (H5Tis_variable_str(t.get()) > 0) {
    char* p = nullptr;
    Handle mt = internal::Type(H5Tcopy(H5T_C_S1));
    H5Tset_size(mt.get(), H5T_VARIABLE);
    if (H5Aread(a->get(), mt.get(), &p) < 0) {
      return Corrupt(path, WithDetail(absl::StrFormat("cannot read attribute /%s", name)));
    }
    std::string v = p ? p : "";
    H5free_memory(p);
    return v;
  }
  size_t n = H5Tget_size(t.get());
  if (n == 0 || n > static_cast<uint64_t>(max_bytes)) {
    return Corrupt(path, absl::StrFormat("attribute /%s claims a string of %d bytes in a file "
                                         "of %d", name, n, max_bytes));
  }
  std::string buf(n, '\0');
  if (H5Aread(a->get(), t.get(), buf.data()) < 0) {
    return Corrupt(path, WithDetail(absl::StrFormat("cannot read attribute /%s", name)));
  }
  while (!buf.empty() && buf.back() == '\0') buf.pop_back();
  return buf;
}

// Names of the links in group `g`, in creation order when the group tracks it. Every link
// must be a hard link (no soft or external links into other files).
absl::StatusOr<std::vector<std::string>> Children(hid_t g, const std::string& path,
                                                  const std::string& where) {
  H5G_info_t info;
  if (H5Gget_info(g, &info) < 0) return Corrupt(path, WithDetail("cannot list group " + where));
  H5_index_t index = H5_INDEX_NAME;
  {
    Handle gcpl = internal::Plist(H5Gget_create_plist(g));
    unsigned flags = 0;
    if (gcpl.valid() && H5Pget_link_creation_order(gcpl.get(), &flags) >= 0 &&
        (flags & H5P_CRT_ORDER_TRACKED)) {
      index = H5_INDEX_CRT_ORDER;
    }
  }
  std::vector<std::string> out;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    ssize_t len = H5Lget_name_by_idx(g, ".", index, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (len < 0) return Corrupt(path, WithDetail("cannot list group " + where));
    std::string name(static_cast<size_t>(len) + 1, '\0');
    if (H5Lget_name_by_idx(g, ".", index, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT) < 0) {
      return Corrupt(path, WithDetail("cannot list group " + where));
    }
    name.resize(static_cast<size_t>(len));
    H5L_info_t li;
    if (H5Lget_info(g, name.c_str(), &li, H5P_DEFAULT) < 0) {
      return Corrupt(path, WithDetail("cannot read link " + where + name));
    }
    if (li.type != H5L_TYPE_HARD) {
      return Corrupt(path, absl::StrFormat("%s%s is a soft or external link, not stored data",
                                           where, name));
    }
    out.push_back(std::move(name));
  }
  return out;
}

// Opens child `name` of `g` and checks it is a group (want_group) or a dataset.
absl::StatusOr<Handle> OpenChild(hid_t g, const std::string& name, bool want_group,
                                 const std::string& path, const std::string& full) {
  Handle o = internal::Object(H5Oopen(g, name.c_str(), H5P_DEFAULT));
  if (!o.valid()) return Corrupt(path, WithDetail("cannot open " + full));
  H5I_type_t t = H5Iget_type(o.get());
  if (want_group && t != H5I_GROUP) return Corrupt(path, full + " is not a group");
  if (!want_group && t != H5I_DATASET) return Corrupt(path, full + " is not a dataset");
  return o;  // H5Oclose closes groups and datasets alike
}

// What ReadFile knows while it walks a file: its path and size, how many of its bytes
// the tensors read so far have claimed, and the model it is read for.
struct ReadContext {
  std::string path;
  int64_t file_bytes = 0;
  int64_t claimed_bytes = 0;  // 4 per element of every dataset inspected so far
  const ExpectedModel* expected = nullptr;
  bool model_mismatch = false;  // the error returned is "another model", not corruption
};

// Checks a float32 dataset without allocating anything for its data: type, rank, shape
// (element count with overflow checks), storage (chunked, Fletcher-32 and no other
// filter, every chunk present) and size: tensors are stored uncompressed, so all the
// tensors of a file together cannot claim more bytes than the file has. That bounds the
// memory a crafted shape can make the reader take (a (2^32, 2^32) shape once overflowed
// to 0 elements and crashed in H5Dread). Returns the element count.
absl::StatusOr<int64_t> InspectFloatDataset(hid_t d, ReadContext& ctx, const std::string& full,
                                            std::vector<int64_t>* shape) {
  const std::string& path = ctx.path;
  Handle t = internal::Type(H5Dget_type(d));
  if (!t.valid() || H5Tget_class(t.get()) != H5T_FLOAT || H5Tget_size(t.get()) != 4) {
    return Corrupt(path, full + " is not float32");
  }
  Handle sp = internal::Space(H5Dget_space(d));
  const int rank = sp.valid() ? H5Sget_simple_extent_ndims(sp.get()) : -1;
  if (rank < 1 || rank > H5S_MAX_RANK) {
    return Corrupt(path, absl::StrFormat("%s is not an array of rank 1 to %d", full, H5S_MAX_RANK));
  }
  std::vector<hsize_t> dims(rank);
  if (H5Sget_simple_extent_dims(sp.get(), dims.data(), nullptr) != rank) {
    return Corrupt(path, WithDetail(full + ": cannot read its shape"));
  }
  shape->clear();
  std::vector<std::string> dims_text;  // hsize_t may exceed int64_t: print it as stored
  for (hsize_t x : dims) dims_text.push_back(absl::StrCat(x));
  const std::string shape_text =
      absl::StrCat("(", absl::StrJoin(dims_text, ", "), rank == 1 ? ",)" : ")");
  int64_t n = 1;
  for (hsize_t x : dims) {
    if (x < 1) return Corrupt(path, absl::StrFormat("%s has shape %s", full, shape_text));
    if (x > static_cast<hsize_t>(INT64_MAX) ||
        __builtin_mul_overflow(n, static_cast<int64_t>(x), &n) || n > INT64_MAX / 4) {
      return Corrupt(path, absl::StrFormat("%s has shape %s: its size overflows 64 bits", full,
                                           shape_text));
    }
    shape->push_back(static_cast<int64_t>(x));
  }
  const int64_t bytes = n * 4;
  if (bytes > ctx.file_bytes - ctx.claimed_bytes) {
    return Corrupt(path, absl::StrFormat(
        "%s has shape %s, %d bytes of float32, but the file is %d bytes long and the tensors "
        "before it take %d (tensors are stored uncompressed): crafted or corrupt",
        full, shape_text, bytes, ctx.file_bytes, ctx.claimed_bytes));
  }
  ctx.claimed_bytes += bytes;
  Handle dcpl = internal::Plist(H5Dget_create_plist(d));
  if (!dcpl.valid() || H5Pget_layout(dcpl.get()) != H5D_CHUNKED) {
    return Corrupt(path, full + " is not chunked, so it has no Fletcher-32 checksum");
  }
  unsigned flags = 0;
  size_t nelmts = 0;
  unsigned config = 0;
  if (H5Pget_filter_by_id2(dcpl.get(), H5Z_FILTER_FLETCHER32, &flags, &nelmts, nullptr, 0, nullptr,
                           &config) < 0) {
    return Corrupt(path, full + " has no Fletcher-32 checksum filter");
  }
  if (H5Pget_nfilters(dcpl.get()) != 1) {
    return Corrupt(path, full + " has HDF5 filters besides Fletcher-32 (compression?); the "
                                "format stores tensors uncompressed");
  }
  // A chunk that was never written reads back as zeros without an error: all must be there.
  std::vector<hsize_t> chunk(rank);
  if (H5Pget_chunk(dcpl.get(), rank, chunk.data()) != rank) {
    return Corrupt(path, WithDetail(full + ": cannot read its chunk shape"));
  }
  hsize_t want_chunks = 1;  // at most n (every chunk dim >= 1), so no overflow
  for (int i = 0; i < rank; ++i) {
    if (chunk[i] < 1) return Corrupt(path, full + " has an empty chunk shape");
    want_chunks *= (dims[i] + chunk[i] - 1) / chunk[i];
  }
  hsize_t have_chunks = 0;
  if (H5Dget_num_chunks(d, sp.get(), &have_chunks) < 0) {
    return Corrupt(path, WithDetail(full + ": cannot read its chunk index"));
  }
  if (have_chunks != want_chunks) {
    return Corrupt(path, absl::StrFormat("%s stores %d of its %d chunks (data never written)", full,
                                         have_chunks, want_chunks));
  }
  return n;
}

// Reads the `n` elements of a dataset InspectFloatDataset accepted, with every chunk's
// Fletcher-32 checksum verified, and checks that they are finite.
absl::Status ReadFloatData(hid_t d, const ReadContext& ctx, const std::string& full, int64_t n,
                           std::vector<float>* values) {
  Handle dxpl = internal::Plist(H5Pcreate(H5P_DATASET_XFER));
  H5Pset_edc_check(dxpl.get(), H5Z_ENABLE_EDC);
  values->assign(static_cast<size_t>(n), 0.0f);
  if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, dxpl.get(), values->data()) < 0) {
    return Corrupt(ctx.path, WithDetail(full + ": cannot read the data, the file is corrupt"));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite((*values)[i])) {
      return Corrupt(ctx.path, absl::StrFormat("%s holds a non-finite value (%g at index %d)", full,
                                               (*values)[i], i));
    }
  }
  return absl::OkStatus();
}

// `ctx` carries the path and the model to check against; ReadFile sets its size fields
// and model_mismatch.
absl::StatusOr<Checkpoint> ReadFile(ReadContext& ctx) {
  const std::string& path = ctx.path;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    int e = errno;
    if (e == ENOENT) return absl::NotFoundError(absl::StrFormat("%s: no such checkpoint file", path));
    return absl::PermissionDeniedError(absl::StrFormat("%s: %s", path, Errno(e)));
  }
  if (!S_ISREG(st.st_mode)) return absl::FailedPreconditionError(path + ": not a regular file");
  ctx.file_bytes = static_cast<int64_t>(st.st_size);
  // A sound checkpoint of another model: not corruption, and reported as CheckCompatible
  // reports it.
  auto mismatch = [&ctx](absl::Status s) {
    ctx.model_mismatch = true;
    return s;
  };
  // Closing the file closes every object still open in it, even after an error.
  Handle fapl = internal::Plist(H5Pcreate(H5P_FILE_ACCESS));
  H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG);
  Handle file = internal::File(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()));
  if (!file.valid()) {
    return Corrupt(path, WithDetail("not a readable HDF5 file (truncated or corrupt)"));
  }
  const hid_t root = file.get();
  Checkpoint c;
  c.path = path;
  {
    htri_t exists = H5Aexists(root, "format");
    if (exists < 0) return Corrupt(path, WithDetail("cannot read the root group's attributes"));
    if (exists == 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: not a Colonnade checkpoint (no attribute /format)", path));
    }
    absl::StatusOr<std::string> format = ReadStringAttr(root, path, "format", ctx.file_bytes);
    if (!format.ok()) return format.status();
    if (*format != kFormatName) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: not a Colonnade checkpoint (attribute /format is '%s', expected '%s')", path,
          *format, kFormatName));
    }
  }
  constexpr int64_t kMax = INT64_MAX, kIntMax = INT32_MAX;
  absl::StatusOr<int64_t> version = ReadIntAttr(root, path, "/", "format_version", 0, kMax);
  if (!version.ok()) return version.status();
  if (*version != kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: checkpoint format_version %d; this build reads version %d%s", path, *version,
        kFormatVersion, *version > kFormatVersion ? " (written by a newer Colonnade)" : ""));
  }
  c.format_version = *version;
  TrainState& s = c.state;
  struct IntField {
    const char* name;
    int64_t max;
    int64_t* out64;
    int* out32;
  };
  int64_t num_params = 0, has_opt = 0;
  const IntField ints[] = {
      {"step", kMax, &s.step, nullptr},
      {"epoch", kMax, &s.epoch, nullptr},
      {"cursor_epoch", kMax, &s.cursor_epoch, nullptr},
      {"cursor_position", kMax, &s.cursor_position, nullptr},
      {"columns", kIntMax, nullptr, &s.columns},
      {"input_size", kIntMax, nullptr, &s.input_size},
      {"num_classes", kIntMax, nullptr, &s.num_classes},
      {"input_channels", kIntMax, nullptr, &s.input_channels},
      {"num_params", kIntMax, &num_params, nullptr},
      {"has_optimizer_state", 1, &has_opt, nullptr},
  };
  for (const IntField& f : ints) {
    absl::StatusOr<int64_t> v = ReadIntAttr(root, path, "/", f.name, 0, f.max);
    if (!v.ok()) return v.status();
    if (f.out64) *f.out64 = *v;
    if (f.out32) *f.out32 = static_cast<int>(*v);
  }
  absl::StatusOr<uint64_t> seed = ReadUintAttr(root, path, "seed");
  if (!seed.ok()) return seed.status();
  s.seed = *seed;
  for (auto [name, out] : {std::pair<const char*, std::string*>{"model", &s.model},
                           {"flags", &s.flags}}) {
    absl::StatusOr<std::string> v = ReadStringAttr(root, path, name, ctx.file_bytes);
    if (!v.ok()) return v.status();
    *out = *v;
  }
  if (absl::StatusOr<std::string> rng = ReadStringAttr(root, path, "rng", ctx.file_bytes);
      !rng.ok()) {
    return rng.status();
  }
  if (s.model.empty()) return Corrupt(path, "attribute /model is empty");
  if (ctx.expected != nullptr && s.model != ctx.expected->model) {
    return mismatch(absl::FailedPreconditionError(absl::StrFormat(
        "%s: the checkpoint is of model %s, not %s", path, s.model, ctx.expected->model)));
  }
  c.has_optimizer_state = has_opt == 1;
  const int64_t name_step = ParseCheckpointStep(BaseName(path));
  if (name_step >= 0 && name_step != s.step) {
    return Corrupt(path, absl::StrFormat("the file name says step %d but attribute /step is %d",
                                         name_step, s.step));
  }

  // Root objects: /params, and /optimizer exactly when has_optimizer_state.
  absl::StatusOr<std::vector<std::string>> top = Children(root, path, "/");
  if (!top.ok()) return top.status();
  bool saw_params = false, saw_opt = false;
  for (const std::string& n : *top) {
    if (n == "params") saw_params = true;
    else if (n == "optimizer") saw_opt = true;
    else return Corrupt(path, absl::StrFormat("unexpected object /%s", n));
  }
  if (!saw_params) return Corrupt(path, "group /params is missing");
  if (saw_opt != c.has_optimizer_state) {
    return Corrupt(path, c.has_optimizer_state
                             ? "attribute /has_optimizer_state is 1 but group /optimizer is missing"
                             : "group /optimizer is present but /has_optimizer_state is 0");
  }

  std::map<std::string, size_t> index;
  {
    absl::StatusOr<Handle> params = OpenChild(root, "params", true, path, "/params");
    if (!params.ok()) return params.status();
    absl::StatusOr<std::vector<std::string>> layers = Children(params->get(), path, "/params/");
    if (!layers.ok()) return layers.status();
    for (const std::string& layer : *layers) {
      const std::string lpath = "/params/" + layer;
      absl::StatusOr<Handle> lg = OpenChild(params->get(), layer, true, path, lpath);
      if (!lg.ok()) return lg.status();
      absl::StatusOr<std::vector<std::string>> names = Children(lg->get(), path, lpath + "/");
      if (!names.ok()) return names.status();
      if (names->empty()) return Corrupt(path, lpath + " is an empty group");
      for (const std::string& pn : *names) {
        const std::string full = lpath + "/" + pn;
        absl::StatusOr<Handle> d = OpenChild(lg->get(), pn, false, path, full);
        if (!d.ok()) return d.status();
        TensorEntry e;
        e.name = layer + "/" + pn;
        absl::StatusOr<int64_t> learnable = ReadIntAttr(d->get(), path, full + "@", "learnable", 0, 1);
        if (!learnable.ok()) return learnable.status();
        e.learnable = *learnable == 1;
        absl::StatusOr<int64_t> n = InspectFloatDataset(d->get(), ctx, full, &e.shape);
        if (!n.ok()) return n.status();
        if (ctx.expected != nullptr) {  // before the data is read: CheckCompatible's rules
          const ExpectedTensors& want = ctx.expected->tensors;
          auto it = std::find_if(want.begin(), want.end(),
                                 [&](const auto& x) { return x.first == e.name; });
          if (it == want.end()) {
            return mismatch(absl::FailedPreconditionError(absl::StrFormat(
                "%s: /params/%s %s is not a parameter of model %s", path, e.name,
                ShapeText(e.shape), ctx.expected->model)));
          }
          if (it->second != e.shape) {
            return mismatch(absl::FailedPreconditionError(absl::StrFormat(
                "%s: /params/%s has shape %s but model %s expects %s", path, e.name,
                ShapeText(e.shape), ctx.expected->model, ShapeText(it->second))));
          }
        }
        if (auto rs = ReadFloatData(d->get(), ctx, full, *n, &e.value); !rs.ok()) return rs;
        index[e.name] = c.tensors.size();
        c.tensors.push_back(std::move(e));
      }
    }
  }
  if (static_cast<int64_t>(c.tensors.size()) != num_params) {
    return Corrupt(path, absl::StrFormat("/params holds %d tensors but attribute /num_params is %d",
                                         c.tensors.size(), num_params));
  }
  if (ctx.expected != nullptr) {  // a tensor of the model that the file lacks
    if (auto cs = CheckCompatible(c, ctx.expected->tensors, ctx.expected->model); !cs.ok()) {
      return mismatch(cs);
    }
  }
  if (c.has_optimizer_state) {
    absl::StatusOr<Handle> opt = OpenChild(root, "optimizer", true, path, "/optimizer");
    if (!opt.ok()) return opt.status();
    absl::StatusOr<std::vector<std::string>> layers = Children(opt->get(), path, "/optimizer/");
    if (!layers.ok()) return layers.status();
    size_t found = 0;
    for (const std::string& layer : *layers) {
      const std::string lpath = "/optimizer/" + layer;
      absl::StatusOr<Handle> lg = OpenChild(opt->get(), layer, true, path, lpath);
      if (!lg.ok()) return lg.status();
      absl::StatusOr<std::vector<std::string>> pnames = Children(lg->get(), path, lpath + "/");
      if (!pnames.ok()) return pnames.status();
      for (const std::string& pn : *pnames) {
        const std::string ppath = lpath + "/" + pn;
        auto it = index.find(layer + "/" + pn);
        if (it == index.end() || !c.tensors[it->second].learnable) {
          return Corrupt(path, absl::StrFormat("%s has no learnable parameter /params/%s/%s", ppath,
                                               layer, pn));
        }
        TensorEntry& e = c.tensors[it->second];
        absl::StatusOr<Handle> pg = OpenChild(lg->get(), pn, true, path, ppath);
        if (!pg.ok()) return pg.status();
        absl::StatusOr<std::vector<std::string>> leaf = Children(pg->get(), path, ppath + "/");
        if (!leaf.ok()) return leaf.status();
        if (leaf->size() != 1 || (*leaf)[0] != "velocity") {
          return Corrupt(path, absl::StrFormat("%s must hold exactly one dataset, 'velocity'", ppath));
        }
        const std::string vpath = ppath + "/velocity";
        absl::StatusOr<Handle> d = OpenChild(pg->get(), "velocity", false, path, vpath);
        if (!d.ok()) return d.status();
        std::vector<int64_t> vshape;
        absl::StatusOr<int64_t> n = InspectFloatDataset(d->get(), ctx, vpath, &vshape);
        if (!n.ok()) return n.status();
        if (vshape != e.shape) {
          return Corrupt(path, absl::StrFormat("%s has shape %s but /params/%s has %s", vpath,
                                               ShapeText(vshape), e.name, ShapeText(e.shape)));
        }
        if (auto rs = ReadFloatData(d->get(), ctx, vpath, *n, &e.velocity); !rs.ok()) return rs;
        ++found;
      }
    }
    for (const TensorEntry& e : c.tensors) {
      if (e.learnable && e.velocity.empty()) {
        return Corrupt(path, absl::StrFormat("/optimizer/%s/velocity is missing", e.name));
      }
    }
    (void)found;
  }
  return c;
}

}  // namespace

const TensorEntry* Checkpoint::Find(const std::string& name) const {
  for (const TensorEntry& e : tensors)
    if (e.name == name) return &e;
  return nullptr;
}

std::string CheckpointFileName(int64_t step) {
  return absl::StrFormat("ckpt-%09d.h5", step);
}

int64_t ParseCheckpointStep(const std::string& n) {
  constexpr size_t kPrefix = 5, kSuffix = 3;  // "ckpt-", ".h5"
  if (n.size() < kPrefix + 9 + kSuffix || n.rfind("ckpt-", 0) != 0 ||
      n.compare(n.size() - kSuffix, kSuffix, ".h5") != 0) {
    return -1;
  }
  const std::string digits = n.substr(kPrefix, n.size() - kPrefix - kSuffix);
  if (digits.size() > 18) return -1;
  int64_t v = 0;
  for (char ch : digits) {
    if (ch < '0' || ch > '9') return -1;
    v = v * 10 + (ch - '0');
  }
  // Only the canonical spelling (so "ckpt-0000000100.h5" and "ckpt-000000100.h5" cannot
  // both claim step 100).
  return CheckpointFileName(v) == n ? v : -1;
}

std::string ProcessTag() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::strcpy(host, "host");
  std::string tag = absl::StrFormat("%s-%d", host, static_cast<int>(getpid()));
  for (char& c : tag) {
    const bool keep = absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_';
    if (!keep && c != '-') c = '_';
  }
  return tag;
}

absl::StatusOr<std::unique_ptr<DirectoryLock>> DirectoryLock::Acquire(
    const std::string& dir, double wait_secs, std::vector<std::string>* warnings) {
  const std::string d = dir.empty() ? "." : dir;
  if (auto s = MakeDirs(d); !s.ok()) return s;
  const std::string path = JoinPath(d, kFileName);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);  // umask applies
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrFormat("cannot create the checkpoint lock file %s: %s", path, Errno(errno)));
  }
  std::unique_ptr<DirectoryLock> lock(new DirectoryLock());
  lock->dir_ = d;
  lock->owner_ = ProcessTag();
  using Clock = std::chrono::steady_clock;
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(std::max(0.0, wait_secs)));
  while (true) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) break;
    const int e = errno;
    if (e == EINTR) continue;
    if (e != EWOULDBLOCK) {
      // NFS without lockd, Lustre without -o flock, ...: run unprotected, but say so.
      close(fd);
      if (warnings) {
        warnings->push_back(absl::StrFormat(
            "cannot lock checkpoint directory %s (flock %s: %s): its file system does not "
            "support locks, so nothing stops a second job from writing there too",
            d, path, Errno(e)));
      }
      return lock;
    }
    if (StopRequested()) {
      const std::string holder = ReadHolder(fd);
      close(fd);
      return absl::CancelledError(absl::StrFormat(
          "stopped by %s while waiting for checkpoint directory %s, locked by %s",
          SignalName(SignalReceived()), d, holder));
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      const std::string holder = ReadHolder(fd);
      close(fd);
      return absl::UnavailableError(absl::StrFormat(
          "checkpoint directory %s is in use by another job: %s/%s is locked by %s; gave up "
          "after %g s. Two jobs must not share a checkpoint directory: let that job end, or "
          "give this one its own directory",
          d, d, kFileName, holder, wait_secs));
    }
    std::this_thread::sleep_for(
        std::min<Clock::duration>(deadline - now, std::chrono::milliseconds(100)));
  }
  // Ours now. Record who holds it, for the message of the next job that finds it locked.
  const std::string text = HolderText() + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, text.data(), text.size(), 0) < 0) {
    if (warnings) {
      warnings->push_back(
          absl::StrFormat("%s: cannot record the lock's holder: %s", path, Errno(errno)));
    }
  }
  lock->fd_ = fd;
  return lock;
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) close(fd_);  // releases the flock
}

absl::Status Write(const std::string& dir, const TrainState& state,
                   const std::vector<TensorEntry>& entries, int keep_last,
                   std::string* written_path, std::vector<std::string>* warnings,
                   const DirectoryLock* lock) {
  bool has_velocity = false;
  if (auto s = ValidateForWrite(state, entries, &has_velocity); !s.ok()) return s;
  const std::string d = dir.empty() ? "." : dir;
  if (auto s = MakeDirs(d); !s.ok()) return s;
  const std::string name = CheckpointFileName(state.step);
  const std::string final_path = JoinPath(d, name);
  // Temporaries carry host and pid, so that a writer can tell its own from another job's.
  const std::string own_suffix = absl::StrCat(".", lock ? lock->owner() : ProcessTag(), ".tmp");
  const std::string tmp_path = final_path + own_suffix;
  unlink(tmp_path.c_str());  // a leftover of an earlier process with our host and pid
  {
    H5Scope scope;
    absl::Status s = WriteFile(tmp_path, state, entries, has_velocity);
    if (!s.ok()) {
      unlink(tmp_path.c_str());
      return s;
    }
  }
  if (auto s = FsyncPath(tmp_path, false); !s.ok()) {
    unlink(tmp_path.c_str());
    return s;
  }
  if (rename(tmp_path.c_str(), final_path.c_str()) != 0) {
    int e = errno;
    unlink(tmp_path.c_str());
    return absl::InternalError(absl::StrFormat("renaming %s to %s failed: %s", tmp_path, final_path, Errno(e)));
  }
  if (auto s = FsyncPath(d, true); !s.ok()) return s;
  if (written_path) *written_path = final_path;

  // Keep policy and clean-up of partial files; the new checkpoint is durable by now.
  absl::StatusOr<std::vector<std::string>> names = ListDir(d);
  if (!names.ok()) {
    if (warnings) warnings->push_back(std::string(names.status().message()));
    return absl::OkStatus();
  }
  // Another process's temporary may be its write in progress, unless we hold the
  // directory's lock: then no other writer is active and it is a dead holder's leftover.
  const bool clean_others = lock != nullptr && lock->held() && lock->dir() == d;
  std::vector<std::pair<int64_t, std::string>> older;
  for (const std::string& n : *names) {
    int64_t step = ParseCheckpointStep(n);
    if (step >= 0 && step < state.step) older.push_back({step, n});
    if (IsPartialName(n) && (clean_others || absl::EndsWith(n, own_suffix))) {
      const std::string p = JoinPath(d, n);
      if (unlink(p.c_str()) == 0) {
        if (warnings) warnings->push_back(p + ": removed a partial checkpoint left by an interrupted write");
      } else if (warnings && errno != ENOENT) {
        warnings->push_back(absl::StrFormat("%s: cannot remove partial checkpoint: %s", p, Errno(errno)));
      }
    }
  }
  if (keep_last > 0) {
    std::sort(older.rbegin(), older.rend());
    for (size_t i = static_cast<size_t>(keep_last - 1); i < older.size(); ++i) {
      const std::string p = JoinPath(d, older[i].second);
      if (unlink(p.c_str()) != 0 && warnings) {
        warnings->push_back(absl::StrFormat("%s: cannot delete old checkpoint: %s", p, Errno(errno)));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Checkpoint> Read(const std::string& path, const ExpectedModel* expected) {
  ReadContext ctx;
  ctx.path = path;
  ctx.expected = expected;
  H5Scope scope;
  return ReadFile(ctx);
}

absl::StatusOr<Checkpoint> LoadLatestValid(const std::string& dir,
                                           std::vector<std::string>* warnings,
                                           const ExpectedModel* expected) {
  const std::string d = dir.empty() ? "." : dir;
  absl::StatusOr<std::vector<std::string>> names = ListDir(d);
  if (!names.ok()) {
    if (absl::IsNotFound(names.status())) {
      return absl::NotFoundError(absl::StrFormat("no checkpoint in %s: the directory does not exist", d));
    }
    return names.status();
  }
  std::vector<std::pair<int64_t, std::string>> candidates;
  for (const std::string& n : *names) {
    int64_t step = ParseCheckpointStep(n);
    if (step >= 0) candidates.push_back({step, n});
    if (IsPartialName(n) && warnings) {
      warnings->push_back(JoinPath(d, n) + ": partial checkpoint (a write was interrupted); ignored");
    }
  }
  if (candidates.empty()) {
    return absl::NotFoundError(absl::StrFormat("no checkpoint (ckpt-<step>.h5) in %s", d));
  }
  std::sort(candidates.rbegin(), candidates.rend());
  for (const auto& [step, n] : candidates) {
    ReadContext ctx;
    ctx.path = JoinPath(d, n);
    ctx.expected = expected;
    absl::StatusOr<Checkpoint> c;
    {
      H5Scope scope;
      c = ReadFile(ctx);
    }
    if (c.ok() || ctx.model_mismatch) return c;
    if (warnings) warnings->push_back(absl::StrCat("skipped: ", c.status().message()));
  }
  return absl::DataLossError(absl::StrFormat(
      "%s holds %d checkpoint file(s) but none is valid (see the warnings); not starting over "
      "silently: move them away to start over",
      d, candidates.size()));
}

absl::StatusOr<std::string> FindLatestValid(const std::string& dir,
                                            std::vector<std::string>* warnings,
                                            const ExpectedModel* expected) {
  absl::StatusOr<Checkpoint> c = LoadLatestValid(dir, warnings, expected);
  if (!c.ok()) return c.status();
  return c->path;
}

absl::Status CheckCompatible(const Checkpoint& ckpt, const ExpectedTensors& expected,
                             const std::string& model) {
  const std::string& f = ckpt.path;
  if (ckpt.state.model != model) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: the checkpoint is of model %s, not %s", f, ckpt.state.model, model));
  }
  std::set<std::string> wanted;
  for (const auto& [name, shape] : expected) {
    wanted.insert(name);
    const TensorEntry* e = ckpt.Find(name);
    if (e == nullptr) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: /params/%s is missing but model %s has it with shape %s", f, name, model,
          ShapeText(shape)));
    }
    if (e->shape != shape) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: /params/%s has shape %s but model %s expects %s", f, name, ShapeText(e->shape),
          model, ShapeText(shape)));
    }
  }
  for (const TensorEntry& e : ckpt.tensors) {
    if (!wanted.count(e.name)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: /params/%s %s is not a parameter of model %s", f, e.name, ShapeText(e.shape), model));
    }
  }
  return absl::OkStatus();
}

}  // namespace colonnade::checkpoint
