#include "data/hdf5_util.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "data/files.h"

namespace colonnade::data::h5 {

absl::StatusOr<Handle> OpenFileReadOnly(const std::string& path) {
  // Before HDF5 opens it: a FIFO would block in open() forever.
  if (absl::Status s = CheckRegularFile(path); !s.ok()) return s;
  htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 <= 0) {
    return absl::DataLossError(
        absl::StrCat(path, ": not an HDF5 file (no HDF5 signature; corrupt or not a shard)"));
  }
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    return absl::DataLossError(
        absl::StrCat(path, ": HDF5 cannot open the file (truncated or corrupt)"));
  }
  return FileHandle(f);
}

absl::StatusOr<Handle> CreateFile(const std::string& path) {
  Handle fcpl = PlistHandle(H5Pcreate(H5P_FILE_CREATE));
  H5Pset_obj_track_times(fcpl.get(), false);  // no timestamps: byte-identical reruns
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), H5P_DEFAULT);
  if (f < 0) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create file"));
  return FileHandle(f);
}

std::string DescribeType(hid_t type) {
  H5T_class_t cls = H5Tget_class(type);
  size_t size = H5Tget_size(type);
  switch (cls) {
    case H5T_INTEGER: {
      bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
      return absl::StrCat(is_signed ? "int" : "uint", size * 8);
    }
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

const char* DtypeName(Dtype t) {
  switch (t) {
    case Dtype::kUint8: return "uint8";
    case Dtype::kInt32: return "int32";
    case Dtype::kInt64: return "int64";
    case Dtype::kFloat32: return "float32";
    case Dtype::kString: return "string";
  }
  return "?";
}

hid_t MemType(Dtype t) {
  switch (t) {
    case Dtype::kUint8: return H5T_NATIVE_UINT8;
    case Dtype::kInt32: return H5T_NATIVE_INT32;
    case Dtype::kInt64: return H5T_NATIVE_INT64;
    case Dtype::kFloat32: return H5T_NATIVE_FLOAT;
    case Dtype::kString: break;
  }
  return -1;
}

hid_t FileType(Dtype t) {
  switch (t) {
    case Dtype::kUint8: return H5T_STD_U8LE;
    case Dtype::kInt32: return H5T_STD_I32LE;
    case Dtype::kInt64: return H5T_STD_I64LE;
    case Dtype::kFloat32: return H5T_IEEE_F32LE;
    case Dtype::kString: break;
  }
  return -1;
}

namespace {

bool TypeMatches(hid_t type, Dtype want) {
  H5T_class_t cls = H5Tget_class(type);
  size_t size = H5Tget_size(type);
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

absl::StatusOr<Handle> OpenAttr(hid_t file, const std::string& where, const char* name) {
  htri_t exists = H5Aexists(file, name);
  if (exists <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": attribute '", name, "' is missing"));
  }
  hid_t a = H5Aopen(file, name, H5P_DEFAULT);
  if (a < 0) {
    return absl::DataLossError(absl::StrCat(where, ": attribute '", name, "' cannot be read"));
  }
  return AttrHandle(a);
}

}  // namespace

absl::StatusOr<std::string> ReadStringAttr(hid_t file, const std::string& where,
                                           const char* name) {
  absl::StatusOr<Handle> a = OpenAttr(file, where, name);
  if (!a.ok()) return a.status();
  Handle type = TypeHandle(H5Aget_type(a->get()));
  if (H5Tget_class(type.get()) != H5T_STRING) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": attribute '", name, "' has type ",
                                                   DescribeType(type.get()),
                                                   ", expected string"));
  }
  // Memory types are copies of the file type so the character set (ASCII or UTF-8, which
  // HDF5 does not convert between) always matches.
  if (H5Tis_variable_str(type.get()) > 0) {
    Handle mem = TypeHandle(H5Tcopy(type.get()));
    char* s = nullptr;
    if (H5Aread(a->get(), mem.get(), &s) < 0 || s == nullptr) {
      return absl::DataLossError(absl::StrCat(where, ": attribute '", name, "' cannot be read"));
    }
    std::string out(s);
    H5free_memory(s);
    return out;
  }
  size_t size = H5Tget_size(type.get());
  std::string buf(size + 1, '\0');
  Handle mem = TypeHandle(H5Tcopy(type.get()));
  if (H5Aread(a->get(), mem.get(), buf.data()) < 0) {
    return absl::DataLossError(absl::StrCat(where, ": attribute '", name, "' cannot be read"));
  }
  buf.resize(std::strlen(buf.c_str()));
  return buf;
}

absl::StatusOr<int64_t> ReadIntAttr(hid_t file, const std::string& where, const char* name) {
  absl::StatusOr<Handle> a = OpenAttr(file, where, name);
  if (!a.ok()) return a.status();
  Handle type = TypeHandle(H5Aget_type(a->get()));
  Handle space = SpaceHandle(H5Aget_space(a->get()));
  if (H5Tget_class(type.get()) != H5T_INTEGER) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": attribute '", name, "' has type ",
                                                   DescribeType(type.get()),
                                                   ", expected an integer"));
  }
  if (H5Sget_simple_extent_npoints(space.get()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": attribute '", name, "' is not a scalar"));
  }
  int64_t v = 0;
  if (H5Aread(a->get(), H5T_NATIVE_INT64, &v) < 0) {
    return absl::DataLossError(absl::StrCat(where, ": attribute '", name, "' cannot be read"));
  }
  return v;
}

absl::Status WriteStringAttr(hid_t file, const char* name, const std::string& value) {
  // Variable-length UTF-8: h5py returns it as a Python str.
  Handle type = TypeHandle(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Handle space = SpaceHandle(H5Screate(H5S_SCALAR));
  Handle a = AttrHandle(H5Acreate2(file, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  const char* p = value.c_str();
  if (!a.valid() || H5Awrite(a.get(), type.get(), &p) < 0) {
    return absl::InternalError(absl::StrCat("cannot write attribute '", name, "'"));
  }
  return absl::OkStatus();
}

absl::Status WriteIntAttr(hid_t file, const char* name, int64_t value) {
  Handle space = SpaceHandle(H5Screate(H5S_SCALAR));
  Handle a = AttrHandle(
      H5Acreate2(file, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a.valid() || H5Awrite(a.get(), H5T_NATIVE_INT64, &value) < 0) {
    return absl::InternalError(absl::StrCat("cannot write attribute '", name, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Handle> OpenChecked(hid_t file, const std::string& where, const char* name,
                                   Dtype dtype, const std::vector<int64_t>& expected_dims,
                                   std::vector<int64_t>* dims) {
  // H5Lexists needs the name without the leading slash checked level by level; our
  // datasets are all at the root.
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", name, ": dataset is missing"));
  }
  // A link to another file (or a soft link) is never followed: HDF5 would open any path.
  if (std::string why = hdf5::NonHardLinkReason(file, name); !why.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", name, ": ", why));
  }
  hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
  if (d < 0) {
    return absl::DataLossError(absl::StrCat(where, ": ", name, ": dataset cannot be opened"));
  }
  Handle dset = DatasetHandle(d);
  Handle type = TypeHandle(H5Dget_type(d));
  if (!TypeMatches(type.get(), dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", name, ": dtype is ",
                                                   DescribeType(type.get()), ", expected ",
                                                   DtypeName(dtype)));
  }
  Handle space = SpaceHandle(H5Dget_space(d));
  int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> hd(rank > 0 ? rank : 0);
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), hd.data(), nullptr);
  std::vector<int64_t> got(hd.begin(), hd.end());
  bool ok = got.size() == expected_dims.size();
  for (size_t i = 0; ok && i < got.size(); ++i) {
    if (expected_dims[i] >= 0 && expected_dims[i] != got[i]) ok = false;
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", name, ": shape is ",
                                                   DescribeShape(got), ", expected ",
                                                   DescribeShape(expected_dims)));
  }
  // Every element the shape claims must have stored bytes before a caller allocates for it:
  // a crafted file can declare any shape at no cost (storage is allocated on write).
  if (std::string why = hdf5::MissingStorageReason(d); !why.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", name, ": ", why));
  }
  if (dims) *dims = got;
  return dset;
}

absl::Status ReadAll(hid_t dset, const std::string& where, const char* name, Dtype dtype,
                     void* out) {
  if (H5Dread(dset, MemType(dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) {
    return absl::DataLossError(
        absl::StrCat(where, ": ", name, ": read failed (truncated or corrupt data)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ReadStrings(hid_t dset, const std::string& where,
                                                     const char* name, int64_t count) {
  Handle ftype = TypeHandle(H5Dget_type(dset));
  std::vector<std::string> out;
  if (count == 0) return out;
  if (H5Tis_variable_str(ftype.get()) > 0) {
    Handle mem = TypeHandle(H5Tcopy(ftype.get()));
    std::vector<char*> ptrs(count, nullptr);
    if (H5Dread(dset, mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()) < 0) {
      return absl::DataLossError(absl::StrCat(where, ": ", name, ": read failed"));
    }
    for (char* p : ptrs) {
      out.emplace_back(p ? p : "");
    }
    Handle space = SpaceHandle(H5Dget_space(dset));
    H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, ptrs.data());
    return out;
  }
  size_t size = H5Tget_size(ftype.get());
  Handle mem = TypeHandle(H5Tcopy(ftype.get()));
  std::vector<char> buf(count * size, '\0');
  if (H5Dread(dset, mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0) {
    return absl::DataLossError(absl::StrCat(where, ": ", name, ": read failed"));
  }
  for (int64_t i = 0; i < count; ++i) {
    const char* p = buf.data() + i * size;
    out.emplace_back(p, strnlen(p, size));
  }
  return out;
}

absl::Status WriteDataset(hid_t file, const char* name, Dtype dtype,
                          const std::vector<int64_t>& dims, const void* data) {
  std::vector<hsize_t> hd(dims.begin(), dims.end());
  Handle space = SpaceHandle(H5Screate_simple(static_cast<int>(hd.size()), hd.data(), nullptr));
  Handle dcpl = PlistHandle(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_obj_track_times(dcpl.get(), false);
  Handle d = DatasetHandle(H5Dcreate2(file, name, FileType(dtype), space.get(), H5P_DEFAULT,
                                      dcpl.get(), H5P_DEFAULT));
  if (!d.valid()) return absl::InternalError(absl::StrCat(name, ": cannot create dataset"));
  bool empty = false;
  for (int64_t x : dims) empty |= x == 0;
  if (!empty && H5Dwrite(d.get(), MemType(dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
    return absl::InternalError(absl::StrCat(name, ": write failed"));
  }
  return absl::OkStatus();
}

absl::Status WriteStrings(hid_t file, const char* name, const std::vector<std::string>& values) {
  Handle type = TypeHandle(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  hsize_t n = values.size();
  Handle space = SpaceHandle(H5Screate_simple(1, &n, nullptr));
  Handle dcpl = PlistHandle(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_obj_track_times(dcpl.get(), false);
  Handle d = DatasetHandle(
      H5Dcreate2(file, name, type.get(), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
  if (!d.valid()) return absl::InternalError(absl::StrCat(name, ": cannot create dataset"));
  std::vector<const char*> ptrs;
  for (const std::string& s : values) ptrs.push_back(s.c_str());
  if (n > 0 && H5Dwrite(d.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()) < 0) {
    return absl::InternalError(absl::StrCat(name, ": write failed"));
  }
  return absl::OkStatus();
}

}  // namespace colonnade::data::h5
