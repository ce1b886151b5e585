// Internal HDF5 helpers of the checkpoint module: RAII handles, a scope that serialises
// the module's HDF5 calls and silences HDF5's own error printing, and the text of the
// innermost HDF5 error for messages. Not part of the public API (see checkpoint.h).
//
// This module does not use src/data/hdf5_util.h on purpose: DESIGN.md lets checkpoint
// depend on core and parallel only.
#pragma once

#include <hdf5.h>

#include <mutex>
#include <string>

namespace colonnade::checkpoint::internal {

// Held around every public entry point that calls HDF5. Serialises this module's HDF5
// calls (a second thread writing a checkpoint while another reads one), turns off HDF5's
// automatic error-stack printing (errors become absl::Status) and restores the previous
// handler on exit, so other modules keep their setting. Debian's HDF5 is built
// thread-safe, which also makes concurrent calls from src/data safe; with a build that is
// not, the trainer must not read shards on other threads while a checkpoint is written.
class H5Scope {
 public:
  H5Scope();
  ~H5Scope();
  H5Scope(const H5Scope&) = delete;
  H5Scope& operator=(const H5Scope&) = delete;

 private:
  std::unique_lock<std::recursive_mutex> lock_;
  H5E_auto2_t old_func_ = nullptr;
  void* old_data_ = nullptr;
};

// Owns one hid_t and closes it with the matching H5?close. Close() reports the result of
// the close, which matters for files opened for writing (a failed close = lost data).
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Handle() { Close(); }
  Handle(Handle&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      Close();
      id_ = o.id_;
      closer_ = o.closer_;
      o.id_ = -1;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Returns false when the close failed.
  bool Close() {
    bool ok = true;
    if (id_ >= 0 && closer_) ok = closer_(id_) >= 0;
    id_ = -1;
    return ok;
  }

 private:
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

inline Handle File(hid_t id) { return Handle(id, H5Fclose); }
inline Handle Group(hid_t id) { return Handle(id, H5Gclose); }
inline Handle Dataset(hid_t id) { return Handle(id, H5Dclose); }
inline Handle Space(hid_t id) { return Handle(id, H5Sclose); }
inline Handle Type(hid_t id) { return Handle(id, H5Tclose); }
inline Handle Plist(hid_t id) { return Handle(id, H5Pclose); }
inline Handle Attr(hid_t id) { return Handle(id, H5Aclose); }
inline Handle Object(hid_t id) { return Handle(id, H5Oclose); }

// The description of the innermost error on HDF5's error stack of this thread (where the
// error was detected, e.g. "data error detected by Fletcher32 checksum"), or "" when the
// stack is empty. Call right after the failing HDF5 call: the next API call clears it.
std::string LastError();

}  // namespace colonnade::checkpoint::internal
