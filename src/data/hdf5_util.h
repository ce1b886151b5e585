// Small helpers over the HDF5 C API for the shard format: RAII handles, one lock for all
// HDF5 calls of the data module, and attribute / dataset accessors that validate types and
// shapes and return absl::Status errors naming the file and the field.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hdf5/hdf5.h"

namespace colonnade::data::h5 {

// The project-wide HDF5 scope (one lock for all modules, HDF5 error printing off) and
// handle, from src/hdf5.
using Lock = ::colonnade::hdf5::Scope;
using Handle = ::colonnade::hdf5::Handle;

inline Handle FileHandle(hid_t id) { return Handle(id, H5Fclose); }
inline Handle DatasetHandle(hid_t id) { return Handle(id, H5Dclose); }
inline Handle SpaceHandle(hid_t id) { return Handle(id, H5Sclose); }
inline Handle TypeHandle(hid_t id) { return Handle(id, H5Tclose); }
inline Handle PlistHandle(hid_t id) { return Handle(id, H5Pclose); }
inline Handle AttrHandle(hid_t id) { return Handle(id, H5Aclose); }

// Opens an existing regular file read-only. Errors: NotFound for a missing file,
// FailedPrecondition for a FIFO, device or directory (never opened), DataLoss for a file
// that HDF5 cannot open (truncated, corrupt, not HDF5).
absl::StatusOr<Handle> OpenFileReadOnly(const std::string& path);
// Creates (truncates) a file with object time tracking off, so output is deterministic.
absl::StatusOr<Handle> CreateFile(const std::string& path);

// "uint8", "int32", "float32", "string", ... for messages.
std::string DescribeType(hid_t type);
std::string DescribeShape(const std::vector<int64_t>& dims);

// Attributes on the root group of `file`. `where` is the file path used in messages.
absl::StatusOr<std::string> ReadStringAttr(hid_t file, const std::string& where, const char* name);
absl::StatusOr<int64_t> ReadIntAttr(hid_t file, const std::string& where, const char* name);
absl::Status WriteStringAttr(hid_t file, const char* name, const std::string& value);
absl::Status WriteIntAttr(hid_t file, const char* name, int64_t value);

// Expected element type of a dataset.
enum class Dtype { kUint8, kInt32, kInt64, kFloat32, kString };
const char* DtypeName(Dtype t);

// Opens dataset `name` ("/labels") and checks its element type and shape. In
// `expected_dims`, -1 accepts any extent. The actual dims are returned in `dims`. Refuses
// soft and external links, virtual datasets and external raw storage, and a dataset whose
// stored bytes do not cover its shape (never-written storage reads back as zeros), so a
// caller may allocate for the returned dims: the bytes are in the file.
absl::StatusOr<Handle> OpenChecked(hid_t file, const std::string& where, const char* name,
                                   Dtype dtype, const std::vector<int64_t>& expected_dims,
                                   std::vector<int64_t>* dims);

// Whole-dataset reads into host vectors (after OpenChecked).
absl::Status ReadAll(hid_t dset, const std::string& where, const char* name, Dtype dtype,
                     void* out);
absl::StatusOr<std::vector<std::string>> ReadStrings(hid_t dset, const std::string& where,
                                                     const char* name, int64_t count);

// Writes a whole dataset with contiguous layout.
absl::Status WriteDataset(hid_t file, const char* name, Dtype dtype,
                          const std::vector<int64_t>& dims, const void* data);
absl::Status WriteStrings(hid_t file, const char* name, const std::vector<std::string>& values);

hid_t MemType(Dtype t);  // the native HDF5 memory type for t (not for kString)
hid_t FileType(Dtype t);  // the little-endian file type for t

}  // namespace colonnade::data::h5
