// The one HDF5 layer of the project, used by every module that reads or writes HDF5 files
// (src/data shards, src/checkpoint checkpoints, the trainer's predictions): an RAII handle
// for HDF5's identifiers, the one scope every HDF5 call of the project runs in, the checks
// every reader of a user-supplied file applies, files created and opened with the project's
// properties, groups and links, attribute and dataset read/write (whole, or blocks of rows
// of chunked datasets) with one string encoding and one error mapping. One scope for all
// modules matters: with an HDF5 build that is not thread-safe, a checkpoint written on the
// main thread while reader threads read shards must be serialised by a single lock, not one
// lock per module.
//
// This header does not include <hdf5.h>, and no file outside src/hdf5 does: every HDF5 call
// of the project is in this folder (tests may still craft files with the C API), and the
// other libraries link colonnade_hdf5, not HDF5 (house.hdf5_layer checks it).
//
// Error mapping (every function below that returns a Status follows it; callers map
// codes to exit codes, docs/OPERATIONS.md):
//   NotFound            nothing at the path given;
//   FailedPrecondition  the path is not a regular file (FIFO, device, directory);
//   DataLoss            a file handed to us is malformed: not HDF5, truncated, a missing
//                       or ill-typed or ill-shaped attribute or dataset, a link or storage
//                       the checks refuse, a failed read or checksum. A file is data, so
//                       whatever is wrong inside it is damaged data, never a usage error;
//   InvalidArgument     the caller's own argument is wrong (a value this layer cannot store);
//   PermissionDenied    a file cannot be created;
//   Internal            HDF5 failed to create, write, flush or close (a full disk).
// Functions of the write path (and the few with no file name to give) leave the file out:
// their messages say what failed, "creating group params (HDF5's reason)", for the caller
// to place ("writing checkpoint <file>: ..."); a caller with wording of its own (shards:
// "<file>: flush failed") may replace the message, keeping the code.
// Messages name the file (`file`, a path for messages) and the field as the caller shows it
// (`label`: "'height'" for a shard, "/step" for a checkpoint), so each format keeps the
// wording its users and tests know: "<file>: attribute <label> is missing".
//
// Strings are written in ONE encoding per kind of object:
//  - attributes: variable-length UTF-8 scalars, which h5py returns as str (a fixed-length
//    string comes back as bytes, so `f.attrs["format"] == "colonnade-dataset"` was False in
//    user scripts). Their bytes live in HDF5's global heap, which, unlike object headers,
//    has no checksum; so every object that holds string attributes also holds two integer
//    attributes in its header: kStringChecksumAttr, the CRC-32 of all its variable-length
//    string attributes (names and values, in name order), and kStringHeapsAttr, the
//    address, size and CRC-32 of each global heap collection of the file. Before a
//    variable-length string attribute is read, the collections are checked with plain
//    reads of the file (HDF5 1.10 trusts the sizes inside a collection: a flipped byte
//    there made it crash or loop for ever), then the strings against their CRC (DataLoss
//    on a mismatch): a changed byte of any string is caught, and so is a string attribute
//    another program added or replaced afterwards. The writer finds the collections by
//    reading the file back, so formats write their string attributes while the file is
//    small, before their data. Objects written by older builds carry no checksum
//    (fixed-length strings, or shards with variable-length ones): they read as before.
//  - string datasets (class names, shard file names): fixed-length, null-padded UTF-8
//    (h5py returns bytes for either kind of string dataset: `.asstr()` them).
// Readers accept fixed- and variable-length strings of either character set, so files of
// every earlier build still read (tests/hdf5, tests/checkpoint/checkpoint_compat_test.cc).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace colonnade::hdf5 {

// HDF5's hid_t (an object identifier, >= 0 when valid), named without <hdf5.h>; hdf5.cc
// checks that it is the same type.
using Id = int64_t;

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

// Owns one identifier and closes it with the matching H5?close. Close() reports the
// result, which matters for files opened for writing (a failed close = lost data).
class Handle {
 public:
  using Closer = int (*)(Id);  // H5Fclose, H5Dclose, ... (herr_t is int)
  Handle() = default;
  Handle(Id id, Closer closer) : id_(id), closer_(closer) {}
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
  Id get() const { return id_; }
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
  Id id_ = -1;
  Closer closer_ = nullptr;
};

Handle FileHandle(Id id);
Handle GroupHandle(Id id);
Handle DatasetHandle(Id id);
Handle SpaceHandle(Id id);
Handle TypeHandle(Id id);
Handle PlistHandle(Id id);
Handle AttrHandle(Id id);
// H5Oopen's result, a group or a dataset: H5Oclose closes either.
Handle ObjectHandle(Id id);

// ---- checks for files a user may hand us (shards, checkpoints) ---------------------------
//
// Both return "" when all is well, else a short reason for an error message of the caller
// ("is an external link to 'other.h5:/labels'"); the caller adds the file and field.

// Why the link `name` (one path component, e.g. "labels") of group `loc` is not data stored
// in this file: a soft link, or an external link that HDF5 would follow to any path on the
// machine (a FIFO there blocks forever, a device reads forever); "" for a hard link. Check
// before opening an object by name.
std::string NonHardLinkReason(Id loc, const char* name);

// Why dataset `dset` does not hold every byte its shape claims: a virtual dataset (its
// data is in other files), raw data in external files, storage never allocated, chunks
// never written (HDF5 reads those back as fill values, i.e. zeros, without an error), or
// more storage than the file has bytes. "" when every element has stored bytes. Costs no
// data read (chunked: one walk of the chunk index); call before allocating for a read.
std::string MissingStorageReason(Id dset);

// The description of the innermost error on this thread's HDF5 error stack (e.g. "data
// error detected by Fletcher32 checksum"), or "" when it is empty. Call right after the
// failing HDF5 call: the next API call clears the stack.
std::string LastError();
// `what`, followed by " (LastError())" when HDF5 left a description.
std::string WithLastError(const std::string& what);

// ---- files ---------------------------------------------------------------------------------

// Opens an existing regular file read-only. NotFound / FailedPrecondition /
// PermissionDenied as core/paths.h's CheckRegularFile (checked before HDF5 opens it: a
// FIFO would block in open() forever); DataLoss for a file that HDF5 cannot open
// (truncated, corrupt, not HDF5).
absl::StatusOr<Handle> OpenFileReadOnly(const std::string& path);
// Opens `path` read-only for a caller that has checked the path itself (checkpoints stat
// it to report a missing file in their own words), with a strong close: closing the file
// closes every object still open in it, even after an error. DataLoss "<path>: not a
// readable HDF5 file (truncated or corrupt) (HDF5's reason)".
absl::StatusOr<Handle> OpenFileReadOnlyStrongClose(const std::string& path);
// Whether `path` begins with an HDF5 signature; false when it does not or cannot be read.
// For a path known to be a regular file (a FIFO would block).
bool IsHdf5File(const std::string& path);

// How CreateFile makes a file. The defaults are those of shards and predictions.
struct FileOptions {
  // Fail when the path exists, instead of truncating it.
  bool exclusive = false;
  // The HDF5 1.10 file format and no other (library version bounds v110 to v110):
  // superblock v3 and version 2 object headers, so all metadata carries checksums;
  // readable by HDF5 >= 1.10. Checkpoints.
  bool format_v110 = false;
  // The root group tracks and indexes the creation order of its links, as the groups of
  // OpenOrCreateGroup do, so ListHardLinks returns them in the order written.
  bool link_creation_order = false;
};
// Creates a file, with object time tracking off so that output is deterministic.
// PermissionDenied "creating the file (HDF5's reason)"; Internal "file format bounds (...)"
// when HDF5 refuses format_v110.
absl::StatusOr<Handle> CreateFile(const std::string& path, const FileOptions& options = {});
// Writes what HDF5 holds in memory of the file that `loc` belongs to into the file.
// Internal "flushing the file (HDF5's reason)".
absl::Status Flush(Id loc);
// The size in bytes of the file that object `loc` belongs to, or -1 when unknown.
int64_t FileSizeOf(Id loc);

// ---- groups and links ----------------------------------------------------------------------

// Whether group `loc` has a link `name` (of any kind; false when HDF5 cannot tell).
bool LinkExists(Id loc, const char* name);
// How many links group `loc` has, or -1 when HDF5 cannot tell.
int64_t LinkCount(Id loc);
// 1 when object `loc` has attribute `name`, 0 when not, -1 when HDF5 cannot tell (then
// LastError() says why: nothing runs after the failed call).
int AttrExists(Id loc, const char* name);
// Group `name` of `loc`, created when missing, tracking and indexing the creation order of
// its links (see FileOptions) and with no timestamps. Internal "opening group <name> (...)"
// or "creating group <name> (...)".
absl::StatusOr<Handle> OpenOrCreateGroup(Id loc, const std::string& name);
// The names of the links of group `group`, in creation order when the group tracks it
// (else in name order; a file's identifier, which stands for its root group, lists in name
// order). Every link must be a hard link: DataLoss "<file>: <label><name> is
// a soft or external link, not stored data", and "<file>: cannot list group <label> (...)"
// or "<file>: cannot read link <label><name> (...)". `label` is the group's path with its
// trailing slash ("/", "/params/").
absl::StatusOr<std::vector<std::string>> ListHardLinks(Id group, const std::string& file,
                                                       const std::string& label);
enum class ObjectType { kGroup, kDataset };
// Opens the object `name` of group `loc` (after ListHardLinks: a hard link) and checks that
// it is a group or a dataset, as `want` says. DataLoss "<file>: cannot open <label> (...)",
// "<file>: <label> is not a group" or "... is not a dataset". Closing the handle closes
// either kind.
absl::StatusOr<Handle> OpenObject(Id loc, const std::string& name, ObjectType want,
                                  const std::string& file, const std::string& label);

// ---- types and shapes ----------------------------------------------------------------------

// Element types of datasets.
enum class Dtype { kUint8, kInt32, kInt64, kFloat32, kString };
const char* DtypeName(Dtype t);  // "uint8", ...
Id MemType(Dtype t);             // the native HDF5 memory type (not for kString)
Id FileType(Dtype t);            // the little-endian file type (not for kString)
// "uint8", "int32", "float32", "string", ... for messages.
std::string DescribeType(Id type);
// "[20, 8, 8, 3]"; -1 prints as "*" (any extent).
std::string DescribeShape(const std::vector<int64_t>& dims);

// The extents of a dataset's (or attribute's) dataspace `space`; DataLoss naming `file`
// and `label` when unreadable.
absl::StatusOr<std::vector<uint64_t>> Extents(Id space, const std::string& file,
                                              const std::string& label);
// The product of `dims` times `element_bytes`, or false when it exceeds 2^63 - 1: a
// crafted file can claim any shape at no cost, so sizes are checked before allocating.
bool CheckedByteCount(const std::vector<uint64_t>& dims, uint64_t element_bytes, int64_t* bytes);

// ---- attributes ----------------------------------------------------------------------------
//
// `loc` holds attribute `name`; messages read "<file>: attribute <label> ...". Every
// attribute must hold a single value of the requested class (DataLoss otherwise).

absl::StatusOr<int64_t> ReadIntAttr(Id loc, const char* name, const std::string& file,
                                    const std::string& label);
absl::StatusOr<uint64_t> ReadUintAttr(Id loc, const char* name, const std::string& file,
                                      const std::string& label);
// Fixed- or variable-length, ASCII or UTF-8. A fixed-length string that claims more bytes
// than its file has is refused before memory is allocated for it. A variable-length one is
// checked against the string checksum of `loc` when `loc` has one (see the top of this
// file): DataLoss "<file>: attribute <label>: ... do not match their checksum ...".
absl::StatusOr<std::string> ReadStringAttr(Id loc, const char* name, const std::string& file,
                                           const std::string& label);
// Little-endian int64 / uint64 scalars; Internal "cannot write attribute NAME" on failure.
absl::Status WriteIntAttr(Id loc, const char* name, int64_t value);
absl::Status WriteUintAttr(Id loc, const char* name, uint64_t value);
// A variable-length UTF-8 scalar, then the string checksum of `loc` brought up to date
// (see the top of this file: the file is flushed and its heaps read back, so write string
// attributes before large data). InvalidArgument for a value with a NUL byte (it would end
// the string on read) and for the names of the checksum's attributes.
absl::Status WriteStringAttr(Id loc, const char* name, const std::string& value);
// The integer attributes of the string checksum (see the top of this file): the CRC-32 of
// an object's variable-length string attributes, and the (address, bytes, CRC-32) of each
// global heap collection of the file, which the reader checks before HDF5 parses one.
inline constexpr char kStringChecksumAttr[] = "string_attrs_crc32";
inline constexpr char kStringHeapsAttr[] = "string_heaps_crc32";

// ---- whole datasets ------------------------------------------------------------------------

// Opens dataset `name` ("/labels") of `file_id` and checks its element type and shape. In
// `expected_dims`, -1 accepts any extent. The actual dims are returned in `dims`. Refuses
// soft and external links, virtual datasets and external raw storage, and a dataset whose
// stored bytes do not cover its shape (never-written storage reads back as zeros), so a
// caller may allocate for the returned dims: the bytes are in the file. Messages read
// "<file>: <name>: ...".
absl::StatusOr<Handle> OpenChecked(Id file_id, const std::string& file, const char* name,
                                   Dtype dtype, const std::vector<int64_t>& expected_dims,
                                   std::vector<int64_t>* dims);
// Whole-dataset reads into host memory (after OpenChecked).
absl::Status ReadAll(Id dset, const std::string& file, const char* name, Dtype dtype, void* out);
absl::StatusOr<std::vector<std::string>> ReadStrings(Id dset, const std::string& file,
                                                     const char* name, int64_t count);

struct WriteOptions {
  // 0: contiguous layout. > 0: chunked in whole rows (dim-0 slices), at most this many
  // bytes per chunk but at least one row, each chunk with a Fletcher-32 checksum (which
  // needs a chunked layout; readers verify it). Every element is written, so no fill.
  int64_t checksummed_chunk_bytes = 0;
  // Integer attributes written on the dataset before it is closed.
  std::vector<std::pair<const char*, int64_t>> int_attrs;
};
// Creates dataset `name` in `loc` (type `dtype`, shape `dims`) and writes all of `data`
// (nothing to write when an extent is 0), then closes it, checking the close. Errors are
// Internal "<label>: cannot create dataset|write failed|... (HDF5's reason)".
absl::Status WriteDataset(Id loc, const char* name, const std::string& label, Dtype dtype,
                          const std::vector<int64_t>& dims, const void* data,
                          const WriteOptions& options = {});
// A 1-D dataset of fixed-length, null-padded UTF-8 strings (see the top of this file).
absl::Status WriteStrings(Id loc, const char* name, const std::vector<std::string>& values);

// ---- chunked datasets: blocks of rows, checksums --------------------------------------------

// The largest rank HDF5 allows a dataset (H5S_MAX_RANK).
inline constexpr int kMaxRank = 32;

// Creates dataset `name` in `loc` (type `dtype`, shape `dims`) for writing block by block
// (WriteBlock): chunked one row (dim-0 slice) per chunk, uncompressed, so reading one row
// later reads one contiguous piece of the file; dim 0 may grow or shrink (SetExtent); no
// fill value is written (every row will be) and no timestamps. Raw shards' /images.
// Internal "<name>: cannot create dataset (HDF5's reason)".
absl::StatusOr<Handle> CreateGrowableDataset(Id loc, const char* name, Dtype dtype,
                                             const std::vector<int64_t>& dims);
// Sets the extents of a dataset of CreateGrowableDataset. Internal "cannot set extent (...)".
absl::Status SetExtent(Id dset, const std::vector<int64_t>& dims);
// Writes the block of `dset` that begins at `start` and has extents `count` (one entry per
// dimension) from `data`, which holds the block densely in row-major order. Internal
// "write failed (HDF5's reason)".
absl::Status WriteBlock(Id dset, absl::Span<const int64_t> start, absl::Span<const int64_t> count,
                        Dtype dtype, const void* data);

// A dataset held open for many reads of parts of it (a shard's /images, image by image or,
// for JPEG shards, byte range by byte range), with HDF5's chunk cache off: every chunk is
// read straight into the caller's buffer. Its dataspace is opened once, not per read.
class DatasetReader {
 public:
  DatasetReader() = default;
  // Opens dataset `name` of `file` (check the link with NonHardLinkReason first). DataLoss
  // "<name>: cannot open (HDF5's reason)".
  static absl::StatusOr<DatasetReader> Open(Id file, const char* name);
  // How many elements the dataset has, or -1 when unknown.
  int64_t Elements() const;
  // The whole dataset into `out`. DataLoss "read failed (HDF5's reason)".
  absl::Status ReadAll(Dtype dtype, void* out);
  // The block at `start` with extents `count`, as WriteBlock writes it. DataLoss "read
  // failed (HDF5's reason)", also for a block outside the dataset.
  absl::Status ReadBlock(absl::Span<const int64_t> start, absl::Span<const int64_t> count,
                         Dtype dtype, void* out);

 private:
  Handle dset_, space_;
};

// The extents of dataset `dset` once its element type is `dtype` and its rank 1 to
// kMaxRank; any extent, 0 included (check them before allocating). DataLoss "<file>:
// <label> is not float32" (DtypeName), "<file>: <label> is not an array of rank 1 to 32" or
// Extents' message.
absl::StatusOr<std::vector<uint64_t>> ArrayExtents(Id dset, Dtype dtype, const std::string& file,
                                                   const std::string& label);
// Checks that dataset `dset` of extents `dims` (ArrayExtents) has the layout that lets every
// byte of its data be verified on read (checkpoints' tensors): chunked, with a Fletcher-32
// checksum on every chunk and no other filter (uncompressed), and every chunk written (a
// chunk never written reads back as zeros, no error). DataLoss "<file>: <label> is not
// chunked, so it has no Fletcher-32 checksum", "... has no Fletcher-32 checksum filter",
// "... has HDF5 filters besides Fletcher-32 ...", "... stores 3 of its 5 chunks (data never
// written)", ...
absl::Status CheckChecksummedChunks(Id dset, const std::vector<uint64_t>& dims,
                                    const std::string& file, const std::string& label);
// The whole of dataset `dset` (after CheckChecksummedChunks) into `out`, every chunk's
// Fletcher-32 checksum verified. DataLoss "<file>: <label>: cannot read the data, the file
// is corrupt (HDF5's reason, e.g. 'data error detected by Fletcher32 checksum')".
absl::Status ReadChecksummed(Id dset, const std::string& file, const std::string& label,
                             Dtype dtype, void* out);

}  // namespace colonnade::hdf5
