// The HDF5 plumbing shared by the modules that read and write HDF5 files (src/data shards,
// src/checkpoint checkpoints): an RAII handle for hid_t and the one scope every HDF5 call
// of the project runs in. One scope for all modules matters: with an HDF5 build that is
// not thread-safe, a checkpoint written on the main thread while reader threads read
// shards must be serialised by a single lock, not one lock per module.
#pragma once

#include <hdf5.h>

#include <mutex>
#include <string>

namespace colonnade::hdf5 {

// HDF5's automatic error-stack printing ("HDF5-DIAG: Error detected in HDF5 ...") is off
// in every Colonnade program: errors become absl::Status with one-line messages of our own
// (LastError() carries HDF5's innermost description into them). This module owns that
// setting. HDF5 keeps it per thread when built thread-safe (Debian's build is), so it is
// turned off twice over:
//  - for the program's main thread when the program starts (a static initialiser of this
//    module), which also covers an HDF5 call made outside any Scope by mistake;
//  - for the calling thread by every Scope, which covers threads started later (the data
//    pipeline's readers). It stays off after the Scope ends: a handle closed late must not
//    print either, and nothing in the project ever wants the stack printed.
// Tests: checkpoint_tests (Hdf5Errors.*) and trainer.checkpoint_safety.hdf5_one_line.
void SilenceErrorPrinting();

// Held around every code path that calls HDF5: takes the project-wide (recursive) HDF5
// lock and turns off HDF5's automatic error-stack printing on this thread (see above).
class Scope {
 public:
  Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  std::unique_lock<std::recursive_mutex> lock_;
};

// Owns one hid_t and closes it with the matching H5?close. Close() reports the result,
// which matters for files opened for writing (a failed close = lost data).
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
  // Closes the handle (if open); false when the close failed.
  bool Close() {
    bool ok = true;
    if (id_ >= 0 && closer_) ok = closer_(id_) >= 0;
    id_ = -1;
    return ok;
  }
  void Reset() { Close(); }

 private:
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

// ---- checks for files a user may hand us (shards, checkpoints) ---------------------------
//
// Both return "" when all is well, else a short reason for an error message of the caller
// ("is an external link to 'other.h5:/labels'"); the caller adds the file and field.

// Why the link `name` (one path component, e.g. "labels") of group `loc` is not data stored
// in this file: a soft link, or an external link that HDF5 would follow to any path on the
// machine (a FIFO there blocks forever, a device reads forever); "" for a hard link. Check
// before opening an object by name.
std::string NonHardLinkReason(hid_t loc, const char* name);

// Why dataset `dset` does not hold every byte its shape claims: a virtual dataset (its
// data is in other files), raw data in external files, storage never allocated, chunks
// never written (HDF5 reads those back as fill values, i.e. zeros, without an error), or
// more storage than the file has bytes. "" when every element has stored bytes. Costs no
// data read (chunked: one walk of the chunk index); call before allocating for a read.
std::string MissingStorageReason(hid_t dset);

// The description of the innermost error on this thread's HDF5 error stack (e.g. "data
// error detected by Fletcher32 checksum"), or "" when it is empty. Call right after the
// failing HDF5 call: the next API call clears the stack.
std::string LastError();

}  // namespace colonnade::hdf5
