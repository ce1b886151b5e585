// Files, attributes and datasets of the HDF5 layer (hdf5.h): the one place that encodes
// strings and maps HDF5 failures to absl::Status codes.
#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/paths.h"
#include "core/status_macros.h"
#include "hdf5/hdf5.h"

namespace colonnade::hdf5 {

absl::StatusOr<Handle> OpenFileReadOnly(const std::string& path) {
  // Before HDF5 opens it: a FIFO would block in open() forever.
  RETURN_IF_ERROR(CheckRegularFile(path));
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    return absl::DataLossError(
        absl::StrCat(path, ": not an HDF5 file (no HDF5 signature; corrupt or not a shard)"));
  }
  Handle f = FileHandle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!f.valid()) {
    return absl::DataLossError(
        absl::StrCat(path, ": HDF5 cannot open the file (truncated or corrupt)"));
  }
  return f;
}

absl::StatusOr<Handle> CreateFile(const std::string& path) {
  Handle fcpl = PlistHandle(H5Pcreate(H5P_FILE_CREATE));
  H5Pset_obj_track_times(fcpl.get(), false);  // no timestamps: byte-identical reruns
  Handle f = FileHandle(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), H5P_DEFAULT));
  if (!f.valid()) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create file"));
  return f;
}

int64_t FileSizeOf(hid_t loc) {
  Handle file = FileHandle(H5Iget_file_id(loc));
  hsize_t size = 0;
  if (!file.valid() || H5Fget_filesize(file.get(), &size) < 0) return -1;
  return static_cast<int64_t>(size);
}

std::string WithLastError(const std::string& what) {
  const std::string detail = LastError();
  return detail.empty() ? what : absl::StrCat(what, " (", detail, ")");
}

// ---- types and shapes ----------------------------------------------------------------------

const char* DtypeName(Dtype t) {
  switch (t) {
    case Dtype::kUint8:
      return "uint8";
    case Dtype::kInt32:
      return "int32";
    case Dtype::kInt64:
      return "int64";
    case Dtype::kFloat32:
      return "float32";
    case Dtype::kString:
      return "string";
  }
  return "?";
}

hid_t MemType(Dtype t) {
  switch (t) {
    case Dtype::kUint8:
      return H5T_NATIVE_UINT8;
    case Dtype::kInt32:
      return H5T_NATIVE_INT32;
    case Dtype::kInt64:
      return H5T_NATIVE_INT64;
    case Dtype::kFloat32:
      return H5T_NATIVE_FLOAT;
    case Dtype::kString:
      break;
  }
  return -1;
}

hid_t FileType(Dtype t) {
  switch (t) {
    case Dtype::kUint8:
      return H5T_STD_U8LE;
    case Dtype::kInt32:
      return H5T_STD_I32LE;
    case Dtype::kInt64:
      return H5T_STD_I64LE;
    case Dtype::kFloat32:
      return H5T_IEEE_F32LE;
    case Dtype::kString:
      break;
  }
  return -1;
}

std::string DescribeType(hid_t type) {
  const size_t size = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      return absl::StrCat(H5Tget_sign(type) == H5T_SGN_2 ? "int" : "uint", size * 8);
    case H5T_FLOAT:
      return absl::StrCat("float", size * 8);
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    case H5T_VLEN:
      return "vlen";
    case H5T_ARRAY:
      return "array";
    case H5T_ENUM:
      return "enum";
    default:
      return "unknown";
  }
}

std::string DescribeShape(const std::vector<int64_t>& dims) {
  std::vector<std::string> parts;
  for (int64_t d : dims) parts.push_back(d < 0 ? std::string("*") : absl::StrCat(d));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

absl::StatusOr<std::vector<hsize_t>> Extents(hid_t space, const std::string& file,
                                             const std::string& label) {
  const int rank = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(rank > 0 ? rank : 0);
  if (rank < 0 || (rank > 0 && H5Sget_simple_extent_dims(space, dims.data(), nullptr) != rank)) {
    return absl::DataLossError(
        absl::StrCat(file, ": ", WithLastError(label + ": cannot read its shape")));
  }
  return dims;
}

// ---- attributes ----------------------------------------------------------------------------

namespace {

absl::Status AttrError(const std::string& file, const std::string& what) {
  return absl::DataLossError(absl::StrCat(file, ": ", what));
}

// Opens attribute `name` and checks that it holds a single value of class `cls`.
absl::StatusOr<Handle> OpenAttr(hid_t loc, const char* name, const std::string& file,
                                const std::string& label, H5T_class_t cls) {
  const htri_t exists = H5Aexists(loc, name);
  if (exists < 0) return AttrError(file, WithLastError("cannot look up attribute " + label));
  if (exists == 0) return AttrError(file, absl::StrCat("attribute ", label, " is missing"));
  Handle a = AttrHandle(H5Aopen(loc, name, H5P_DEFAULT));
  if (!a.valid()) return AttrError(file, WithLastError("cannot open attribute " + label));
  Handle type = TypeHandle(H5Aget_type(a.get()));
  if (!type.valid() || H5Tget_class(type.get()) != cls) {
    return AttrError(
        file, absl::StrCat("attribute ", label, " has type ",
                           type.valid() ? DescribeType(type.get()) : "unknown",
                           cls == H5T_STRING ? ", expected string" : ", expected an integer"));
  }
  Handle space = SpaceHandle(H5Aget_space(a.get()));
  if (!space.valid() || H5Sget_simple_extent_npoints(space.get()) != 1) {
    return AttrError(file, absl::StrCat("attribute ", label, " is not a single value"));
  }
  return a;
}

absl::Status WriteScalarAttr(hid_t loc, const char* name, hid_t file_type, hid_t mem_type,
                             const void* value) {
  Handle space = SpaceHandle(H5Screate(H5S_SCALAR));
  Handle a = AttrHandle(H5Acreate2(loc, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a.valid() || H5Awrite(a.get(), mem_type, value) < 0 || !a.Close()) {
    return absl::InternalError(WithLastError(absl::StrCat("cannot write attribute ", name)));
  }
  return absl::OkStatus();
}

// The fixed-length, null-padded UTF-8 string type of `size` bytes (at least 1).
Handle FixedStringType(size_t size) {
  Handle type = TypeHandle(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), std::max<size_t>(1, size));
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  return type;
}

}  // namespace

absl::StatusOr<int64_t> ReadIntAttr(hid_t loc, const char* name, const std::string& file,
                                    const std::string& label) {
  ASSIGN_OR_RETURN(Handle a, OpenAttr(loc, name, file, label, H5T_INTEGER));
  // HDF5 clamps an unsigned value beyond INT64_MAX to INT64_MAX on conversion, so a
  // crafted 2^64 - 1 would read (and be reported) as 9223372036854775807: read unsigned
  // 64-bit values as they are and refuse the ones no int64 holds.
  Handle type = TypeHandle(H5Aget_type(a.get()));
  if (type.get() >= 0 && H5Tget_sign(type.get()) == H5T_SGN_NONE && H5Tget_size(type.get()) >= 8) {
    uint64_t u = 0;
    if (H5Aread(a.get(), H5T_NATIVE_UINT64, &u) < 0) {
      return AttrError(file, WithLastError("cannot read attribute " + label));
    }
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return AttrError(file, absl::StrFormat("attribute %s is %d, more than any size or count "
                                             "this format allows",
                                             label, u));
    }
    return static_cast<int64_t>(u);
  }
  int64_t v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_INT64, &v) < 0) {
    return AttrError(file, WithLastError("cannot read attribute " + label));
  }
  return v;
}

absl::StatusOr<uint64_t> ReadUintAttr(hid_t loc, const char* name, const std::string& file,
                                      const std::string& label) {
  ASSIGN_OR_RETURN(Handle a, OpenAttr(loc, name, file, label, H5T_INTEGER));
  uint64_t v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_UINT64, &v) < 0) {
    return AttrError(file, WithLastError("cannot read attribute " + label));
  }
  return v;
}

absl::StatusOr<std::string> ReadStringAttr(hid_t loc, const char* name, const std::string& file,
                                           const std::string& label) {
  ASSIGN_OR_RETURN(Handle a, OpenAttr(loc, name, file, label, H5T_STRING));
  Handle type = TypeHandle(H5Aget_type(a.get()));
  // The memory type is a copy of the file type, so the character set (ASCII or UTF-8,
  // which HDF5 does not convert between) always matches.
  Handle mem = TypeHandle(H5Tcopy(type.get()));
  if (H5Tis_variable_str(type.get()) > 0) {
    char* p = nullptr;
    if (H5Aread(a.get(), mem.get(), &p) < 0) {
      return AttrError(file, WithLastError("cannot read attribute " + label));
    }
    std::string v = p ? p : "";
    H5free_memory(p);
    return v;
  }
  const size_t n = H5Tget_size(type.get());
  const int64_t file_bytes = FileSizeOf(loc);
  if (n == 0 || (file_bytes >= 0 && n > static_cast<uint64_t>(file_bytes))) {
    return AttrError(file, absl::StrFormat("attribute %s claims a string of %d bytes in a "
                                           "file of %d",
                                           label, n, file_bytes));
  }
  std::string buf(n, '\0');
  if (H5Aread(a.get(), mem.get(), buf.data()) < 0) {
    return AttrError(file, WithLastError("cannot read attribute " + label));
  }
  // Null-padded or null-terminated: the value ends at the first NUL.
  buf.resize(strnlen(buf.data(), buf.size()));
  return buf;
}

absl::Status WriteIntAttr(hid_t loc, const char* name, int64_t value) {
  return WriteScalarAttr(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

absl::Status WriteUintAttr(hid_t loc, const char* name, uint64_t value) {
  return WriteScalarAttr(loc, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &value);
}

absl::Status WriteStringAttr(hid_t loc, const char* name, const std::string& value) {
  Handle type = FixedStringType(value.size());
  const std::string buf = value.empty() ? std::string(1, '\0') : value;
  return WriteScalarAttr(loc, name, type.get(), type.get(), buf.data());
}

// ---- datasets ------------------------------------------------------------------------------

namespace {

bool TypeMatches(hid_t type, Dtype want) {
  const H5T_class_t cls = H5Tget_class(type);
  const size_t size = H5Tget_size(type);
  switch (want) {
    case Dtype::kUint8:
      return cls == H5T_INTEGER && size == 1 && H5Tget_sign(type) == H5T_SGN_NONE;
    case Dtype::kInt32:
      return cls == H5T_INTEGER && size == 4 && H5Tget_sign(type) == H5T_SGN_2;
    case Dtype::kInt64:
      return cls == H5T_INTEGER && size == 8 && H5Tget_sign(type) == H5T_SGN_2;
    case Dtype::kFloat32:
      return cls == H5T_FLOAT && size == 4;
    case Dtype::kString:
      return cls == H5T_STRING;
  }
  return false;
}

absl::Status DatasetError(const std::string& file, const char* name, const std::string& what) {
  return absl::DataLossError(absl::StrCat(file, ": ", name, ": ", what));
}

}  // namespace

absl::StatusOr<Handle> OpenChecked(hid_t file_id, const std::string& file, const char* name,
                                   Dtype dtype, const std::vector<int64_t>& expected_dims,
                                   std::vector<int64_t>* dims) {
  if (H5Lexists(file_id, name, H5P_DEFAULT) <= 0) {
    return DatasetError(file, name, "dataset is missing");
  }
  // A link to another file (or a soft link) is never followed: HDF5 would open any path.
  if (std::string why = NonHardLinkReason(file_id, name); !why.empty()) {
    return DatasetError(file, name, why);
  }
  Handle dset = DatasetHandle(H5Dopen2(file_id, name, H5P_DEFAULT));
  if (!dset.valid()) return DatasetError(file, name, "dataset cannot be opened");
  Handle type = TypeHandle(H5Dget_type(dset.get()));
  if (!TypeMatches(type.get(), dtype)) {
    return DatasetError(
        file, name,
        absl::StrCat("dtype is ", DescribeType(type.get()), ", expected ", DtypeName(dtype)));
  }
  Handle space = SpaceHandle(H5Dget_space(dset.get()));
  ASSIGN_OR_RETURN(std::vector<hsize_t> extents, Extents(space.get(), file, name));
  std::vector<int64_t> got(extents.begin(), extents.end());
  bool ok = got.size() == expected_dims.size();
  for (size_t i = 0; ok && i < got.size(); ++i) {
    if (expected_dims[i] >= 0 && expected_dims[i] != got[i]) ok = false;
  }
  if (!ok) {
    return DatasetError(
        file, name,
        absl::StrCat("shape is ", DescribeShape(got), ", expected ", DescribeShape(expected_dims)));
  }
  // Every element the shape claims must have stored bytes before a caller allocates for it:
  // a crafted file can declare any shape at no cost (storage is allocated on write).
  if (std::string why = MissingStorageReason(dset.get()); !why.empty()) {
    return DatasetError(file, name, why);
  }
  if (dims) *dims = got;
  return dset;
}

absl::Status ReadAll(hid_t dset, const std::string& file, const char* name, Dtype dtype,
                     void* out) {
  if (H5Dread(dset, MemType(dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) {
    return DatasetError(file, name, "read failed (truncated or corrupt data)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ReadStrings(hid_t dset, const std::string& file,
                                                     const char* name, int64_t count) {
  Handle ftype = TypeHandle(H5Dget_type(dset));
  Handle mem = TypeHandle(H5Tcopy(ftype.get()));  // same character set, as for attributes
  std::vector<std::string> out;
  if (count == 0) return out;
  if (H5Tis_variable_str(ftype.get()) > 0) {
    std::vector<char*> ptrs(count, nullptr);
    if (H5Dread(dset, mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()) < 0) {
      return DatasetError(file, name, "read failed");
    }
    for (char* p : ptrs) out.emplace_back(p ? p : "");
    Handle space = SpaceHandle(H5Dget_space(dset));
    H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, ptrs.data());
    return out;
  }
  // OpenChecked bounded count * size by the file's stored bytes.
  const size_t size = H5Tget_size(ftype.get());
  std::vector<char> buf(count * size, '\0');
  if (H5Dread(dset, mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0) {
    return DatasetError(file, name, "read failed");
  }
  for (int64_t i = 0; i < count; ++i) {
    const char* p = buf.data() + i * size;
    out.emplace_back(p, strnlen(p, size));
  }
  return out;
}

namespace {

// Creates dataset `name` with file type `ftype` and shape `dims`, writes `data` (memory
// type `mtype`) unless an extent is 0, adds the attributes and closes it.
absl::Status CreateAndWrite(hid_t loc, const char* name, const std::string& label, hid_t ftype,
                            hid_t mtype, const std::vector<int64_t>& dims, const void* data,
                            const WriteOptions& o) {
  auto fail = [&label](const char* what) {
    return absl::InternalError(WithLastError(absl::StrCat(label, ": ", what)));
  };
  std::vector<hsize_t> hd(dims.begin(), dims.end());
  const int rank = static_cast<int>(hd.size());
  bool empty = false;
  for (int64_t x : dims) empty |= x == 0;
  Handle dcpl = PlistHandle(H5Pcreate(H5P_DATASET_CREATE));
  if (o.checksummed_chunk_bytes > 0) {
    if (rank < 1 || empty) return absl::InvalidArgumentError(label + ": nothing to chunk");
    int64_t row = 1;
    for (int i = 1; i < rank; ++i) row *= dims[i];
    const int64_t row_bytes = row * static_cast<int64_t>(H5Tget_size(ftype));
    std::vector<hsize_t> chunk = hd;
    chunk[0] = static_cast<hsize_t>(
        std::max<int64_t>(1, std::min<int64_t>(dims[0], o.checksummed_chunk_bytes / row_bytes)));
    if (H5Pset_chunk(dcpl.get(), rank, chunk.data()) < 0 || H5Pset_fletcher32(dcpl.get()) < 0) {
      return fail("chunk/checksum settings");
    }
  }
  H5Pset_obj_track_times(dcpl.get(), false);  // no timestamps: byte-identical reruns
  if (o.checksummed_chunk_bytes > 0) H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);
  Handle space = SpaceHandle(H5Screate_simple(rank, hd.data(), nullptr));
  Handle d = DatasetHandle(
      H5Dcreate2(loc, name, ftype, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
  if (!d.valid()) return fail("cannot create dataset");
  if (!empty && H5Dwrite(d.get(), mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
    return fail("write failed");
  }
  for (const auto& [attr, value] : o.int_attrs) {
    if (absl::Status s = WriteIntAttr(d.get(), attr, value); !s.ok()) {
      return absl::InternalError(absl::StrCat(label, ": ", s.message()));
    }
  }
  if (!d.Close()) return fail("closing the dataset failed");
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteDataset(hid_t loc, const char* name, const std::string& label, Dtype dtype,
                          const std::vector<int64_t>& dims, const void* data,
                          const WriteOptions& options) {
  if (dtype == Dtype::kString) {
    return absl::InvalidArgumentError(label + ": write strings with WriteStrings");
  }
  for (int64_t x : dims) {
    if (x < 0) return absl::InvalidArgumentError(label + ": negative extent");
  }
  return CreateAndWrite(loc, name, label, FileType(dtype), MemType(dtype), dims, data, options);
}

absl::Status WriteStrings(hid_t loc, const char* name, const std::vector<std::string>& values) {
  size_t width = 1;
  for (const std::string& v : values) width = std::max(width, v.size());
  std::vector<char> buf(values.size() * width, '\0');  // null-padded, one slot per string
  for (size_t i = 0; i < values.size(); ++i) {
    std::memcpy(buf.data() + i * width, values[i].data(), values[i].size());
  }
  Handle type = FixedStringType(width);
  return CreateAndWrite(loc, name, name, type.get(), type.get(),
                        {static_cast<int64_t>(values.size())}, buf.data(), {});
}

}  // namespace colonnade::hdf5
