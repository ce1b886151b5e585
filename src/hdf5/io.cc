// Attributes and whole datasets of the HDF5 layer (hdf5.h): the one place that encodes
// strings (and checksums the string attributes) and maps HDF5 failures to absl::Status
// codes. Files, groups and links: files.cc; blocks of chunked datasets: chunked.cc.
#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "hdf5/hdf5.h"

namespace colonnade::hdf5 {

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

Id MemType(Dtype t) {
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

Id FileType(Dtype t) {
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

std::string DescribeType(Id type) {
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

absl::StatusOr<std::vector<uint64_t>> Extents(Id space, const std::string& file,
                                              const std::string& label) {
  const int rank = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(rank > 0 ? rank : 0);
  if (rank < 0 || (rank > 0 && H5Sget_simple_extent_dims(space, dims.data(), nullptr) != rank)) {
    return absl::DataLossError(
        absl::StrCat(file, ": ", WithLastError(label + ": cannot read its shape")));
  }
  return std::vector<uint64_t>(dims.begin(), dims.end());
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

// The variable-length UTF-8 string type.
Handle VariableStringType() {
  Handle type = TypeHandle(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  return type;
}

// CRC-32 (IEEE 802.3, reflected, as zlib's crc32) of `n` bytes, continuing from `crc`.
uint32_t Crc32(const void* data, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

// Reads the variable-length string attribute `a` (type `type`) into `out`; false on a
// failed read.
bool ReadVariableString(hid_t a, hid_t type, std::string* out) {
  // The memory type is a copy of the file type, so the character set (ASCII or UTF-8,
  // which HDF5 does not convert between) always matches.
  Handle mem = TypeHandle(H5Tcopy(type));
  char* p = nullptr;
  if (H5Aread(a, mem.get(), &p) < 0) return false;
  *out = p ? p : "";
  H5free_memory(p);
  return true;
}

// The CRC-32 of the variable-length string attributes of `loc` that hold one value each:
// name, NUL, value, NUL, in the order of their names. Other attributes do not count.
// The error (a string that cannot be read) is a message for the caller to place.
absl::StatusOr<uint32_t> StringAttrsCrc(hid_t loc) {
  H5O_info_t info;
  if (H5Oget_info2(loc, &info, H5O_INFO_NUM_ATTRS) < 0) {
    return absl::DataLossError(WithLastError("cannot list the attributes"));
  }
  uint32_t crc = 0;
  for (hsize_t i = 0; i < info.num_attrs; ++i) {
    Handle a = AttrHandle(
        H5Aopen_by_idx(loc, ".", H5_INDEX_NAME, H5_ITER_INC, i, H5P_DEFAULT, H5P_DEFAULT));
    if (!a.valid()) return absl::DataLossError(WithLastError("cannot open an attribute"));
    Handle type = TypeHandle(H5Aget_type(a.get()));
    Handle space = SpaceHandle(H5Aget_space(a.get()));
    if (!type.valid() || H5Tget_class(type.get()) != H5T_STRING ||
        H5Tis_variable_str(type.get()) <= 0 || !space.valid() ||
        H5Sget_simple_extent_npoints(space.get()) != 1) {
      continue;
    }
    const ssize_t len = H5Aget_name(a.get(), 0, nullptr);
    std::string name(len > 0 ? static_cast<size_t>(len) + 1 : 1, '\0');
    std::string value;
    if (len < 0 || H5Aget_name(a.get(), name.size(), name.data()) < 0 ||
        !ReadVariableString(a.get(), type.get(), &value)) {
      return absl::DataLossError(WithLastError("cannot read a string attribute"));
    }
    name.resize(static_cast<size_t>(len));
    crc = Crc32(name.data(), name.size() + 1, crc);  // with its NUL
    crc = Crc32(value.c_str(), value.size() + 1, crc);
  }
  return crc;
}

// ---- the string checksum (hdf5.h) ----

// A global heap collection as it lies in the file: where, how long, and the CRC-32 of its
// bytes.
struct HeapCollection {
  int64_t address = 0, bytes = 0;
  uint32_t crc = 0;
};
// At most this many collections per file and this many bytes per collection: far above
// what a few string attributes take (one collection of 4096 bytes), far below anything
// that could exhaust memory.
constexpr size_t kMaxHeapCollections = 64;
constexpr int64_t kMaxHeapCollectionBytes = int64_t{64} << 20;
constexpr int64_t kMinHeapCollectionBytes = 4096;  // HDF5's H5HG_MINSIZE

uint64_t LittleEndian64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// The file that object `loc` belongs to, opened read-only for pread, and its size.
class RawFile {
 public:
  static absl::StatusOr<RawFile> Open(hid_t loc) {
    const ssize_t len = H5Fget_name(loc, nullptr, 0);
    std::string name(len > 0 ? static_cast<size_t>(len) + 1 : 1, '\0');
    if (len <= 0 || H5Fget_name(loc, name.data(), name.size()) < 0) {
      return absl::InternalError(WithLastError("cannot tell the file's name"));
    }
    name.resize(static_cast<size_t>(len));
    RawFile f;
    f.fd_ = open(name.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (f.fd_ < 0 || fstat(f.fd_, &st) != 0) {
      return absl::InternalError(absl::StrCat("cannot open ", name, ": ", std::strerror(errno)));
    }
    f.size_ = static_cast<int64_t>(st.st_size);
    return f;
  }
  RawFile(RawFile&& o) noexcept : fd_(o.fd_), size_(o.size_) { o.fd_ = -1; }
  RawFile(const RawFile&) = delete;
  RawFile& operator=(const RawFile&) = delete;
  ~RawFile() {
    if (fd_ >= 0) close(fd_);
  }
  int64_t size() const { return size_; }
  // `n` bytes at `offset`; false when the file has fewer.
  bool Read(int64_t offset, int64_t n, std::string* out) const {
    out->resize(static_cast<size_t>(n));
    int64_t done = 0;
    while (done < n) {
      const ssize_t r = pread(fd_, out->data() + done, static_cast<size_t>(n - done),
                              static_cast<off_t>(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      done += r;
    }
    return true;
  }

 private:
  RawFile() = default;
  int fd_ = -1;
  int64_t size_ = 0;
};

// The global heap collections of `file` (every variable-length string of the file lives in
// one): the places that begin with the collection signature "GCOL", version 1, and a
// collection size that fits the file. The writer calls this while the file is small (the
// formats write their string attributes before their data).
absl::StatusOr<std::vector<HeapCollection>> FindHeapCollections(const RawFile& file) {
  std::vector<HeapCollection> out;
  constexpr int64_t kBlock = int64_t{1} << 20;
  std::string block, header, bytes;
  for (int64_t at = 0; at < file.size();) {
    const int64_t n = std::min(kBlock + 3, file.size() - at);  // 3: a signature across blocks
    if (!file.Read(at, n, &block)) return absl::InternalError("cannot read the file back");
    size_t skip_to = 0;
    for (size_t i = block.find("GCOL"); i != std::string::npos; i = block.find("GCOL", i + 1)) {
      const int64_t address = at + static_cast<int64_t>(i);
      if (i < skip_to || !file.Read(address, 16, &header)) continue;
      const auto* h = reinterpret_cast<const unsigned char*>(header.data());
      const uint64_t size = LittleEndian64(h + 8);
      if (h[4] != 1 || h[5] != 0 || h[6] != 0 || h[7] != 0 ||
          size < static_cast<uint64_t>(kMinHeapCollectionBytes) ||
          size > static_cast<uint64_t>(std::min(kMaxHeapCollectionBytes, file.size() - address)) ||
          !file.Read(address, static_cast<int64_t>(size), &bytes)) {
        continue;
      }
      if (out.size() == kMaxHeapCollections) {
        return absl::InternalError("more global heap collections than the string checksum holds");
      }
      out.push_back({address, static_cast<int64_t>(size), Crc32(bytes.data(), bytes.size(), 0)});
      skip_to = i + static_cast<size_t>(std::min<uint64_t>(size, block.size()));
    }
    at += kBlock;
  }
  return out;
}

// Checks every collection that kStringHeapsAttr of `loc` lists against the bytes of the
// file, before HDF5 parses any of them: HDF5 1.10 trusts the sizes inside a collection,
// and a flipped byte there made it crash (SIGSEGV, SIGABRT) or loop for ever.
absl::Status VerifyStringHeaps(hid_t loc, const std::string& file, const std::string& label) {
  auto corrupt = [&](const std::string& what) {
    return AttrError(file, absl::StrCat("attribute ", label, ": ", what));
  };
  const htri_t has = H5Aexists(loc, kStringHeapsAttr);
  if (has <= 0) {
    return corrupt(absl::StrCat("the strings' checksum ", kStringChecksumAttr, " is there but ",
                                kStringHeapsAttr, " is missing"));
  }
  Handle a = AttrHandle(H5Aopen(loc, kStringHeapsAttr, H5P_DEFAULT));
  Handle type = TypeHandle(a.valid() ? H5Aget_type(a.get()) : -1);
  Handle space = SpaceHandle(a.valid() ? H5Aget_space(a.get()) : -1);
  const hssize_t n = space.valid() ? H5Sget_simple_extent_npoints(space.get()) : -1;
  if (!type.valid() || H5Tget_class(type.get()) != H5T_INTEGER || n < 3 || n % 3 != 0 ||
      n > static_cast<hssize_t>(3 * kMaxHeapCollections)) {
    return corrupt(absl::StrCat("attribute ", kStringHeapsAttr,
                                " is not a list of (address, bytes, crc32) triples"));
  }
  std::vector<int64_t> v(static_cast<size_t>(n));
  if (H5Aread(a.get(), H5T_NATIVE_INT64, v.data()) < 0) {
    return corrupt(WithLastError(absl::StrCat("cannot read attribute ", kStringHeapsAttr)));
  }
  absl::StatusOr<RawFile> raw = RawFile::Open(loc);
  if (!raw.ok()) return corrupt(std::string(raw.status().message()));
  std::string bytes;
  for (size_t i = 0; i < v.size(); i += 3) {
    const int64_t address = v[i], size = v[i + 1], crc = v[i + 2];
    if (address < 0 || size < 16 || size > kMaxHeapCollectionBytes ||
        address > raw->size() - size || !raw->Read(address, size, &bytes)) {
      return corrupt(
          absl::StrFormat("the string heap it lists at byte %d (%d bytes) is not in "
                          "the file of %d bytes",
                          address, size, raw->size()));
    }
    if (static_cast<int64_t>(Crc32(bytes.data(), bytes.size(), 0)) != crc ||
        bytes.compare(0, 4, "GCOL") != 0) {
      return corrupt(absl::StrFormat(
          "the string heap at byte %d (%d bytes), where the variable-length strings are, does "
          "not match its checksum in %s: the file is corrupt",
          address, size, kStringHeapsAttr));
    }
  }
  return absl::OkStatus();
}

// Checks the variable-length string attributes of `loc` before one of them is read: the
// heaps that hold them (VerifyStringHeaps), then their values against kStringChecksumAttr.
// Objects of older builds have no checksum: nothing to check. `label` is the attribute
// being read.
absl::Status VerifyStringAttrs(hid_t loc, const std::string& file, const std::string& label) {
  const htri_t has = H5Aexists(loc, kStringChecksumAttr);
  if (has < 0) {
    return AttrError(
        file, WithLastError(absl::StrCat("attribute ", label, ": cannot look up its checksum")));
  }
  if (has == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(int64_t stored, ReadIntAttr(loc, kStringChecksumAttr, file,
                                               absl::StrCat("'", kStringChecksumAttr, "'")));
  RETURN_IF_ERROR(VerifyStringHeaps(loc, file, label));
  absl::StatusOr<uint32_t> crc = StringAttrsCrc(loc);
  if (!crc.ok()) {
    return AttrError(file, absl::StrCat("attribute ", label, ": ", crc.status().message()));
  }
  if (stored != static_cast<int64_t>(*crc)) {
    return AttrError(
        file, absl::StrFormat("attribute %s: the string attributes beside it do not match their "
                              "checksum (attribute %s is %d, they give %d): the file is corrupt, "
                              "or another program changed or added a string attribute",
                              label, kStringChecksumAttr, stored, *crc));
  }
  return absl::OkStatus();
}

// Writes the integer attribute `name` of `loc` (a scalar when `values` has one element, a
// 1-D array otherwise), replacing one that is there.
absl::Status ReplaceIntsAttr(hid_t loc, const char* name, const std::vector<int64_t>& values) {
  if (H5Aexists(loc, name) > 0 && H5Adelete(loc, name) < 0) {
    return absl::InternalError(WithLastError(absl::StrCat("cannot replace attribute ", name)));
  }
  if (values.size() == 1) return WriteIntAttr(loc, name, values[0]);
  const hsize_t n = values.size();
  Handle space = SpaceHandle(H5Screate_simple(1, &n, nullptr));
  Handle a =
      AttrHandle(H5Acreate2(loc, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a.valid() || H5Awrite(a.get(), H5T_NATIVE_INT64, values.data()) < 0 || !a.Close()) {
    return absl::InternalError(WithLastError(absl::StrCat("cannot write attribute ", name)));
  }
  return absl::OkStatus();
}

// Brings the string checksum of `loc` up to date: kStringChecksumAttr over its string
// attributes, then, with the file flushed so that its heaps are on disk, kStringHeapsAttr
// over the heap collections of the file.
absl::Status UpdateStringChecksum(hid_t loc) {
  auto fail = [](const std::string& what) {
    return absl::InternalError(
        absl::StrCat("cannot write the string attributes' checksum: ", what));
  };
  absl::StatusOr<uint32_t> crc = StringAttrsCrc(loc);
  if (!crc.ok()) return fail(std::string(crc.status().message()));
  RETURN_IF_ERROR(ReplaceIntsAttr(loc, kStringChecksumAttr, {static_cast<int64_t>(*crc)}));
  if (absl::Status s = Flush(loc); !s.ok()) return fail(std::string(s.message()));
  absl::StatusOr<RawFile> raw = RawFile::Open(loc);
  if (!raw.ok()) return fail(std::string(raw.status().message()));
  absl::StatusOr<std::vector<HeapCollection>> heaps = FindHeapCollections(*raw);
  if (!heaps.ok()) return fail(std::string(heaps.status().message()));
  if (heaps->empty()) return fail("no global heap collection found in the file");
  std::vector<int64_t> triples;
  for (const HeapCollection& h : *heaps) {
    triples.insert(triples.end(), {h.address, h.bytes, static_cast<int64_t>(h.crc)});
  }
  return ReplaceIntsAttr(loc, kStringHeapsAttr, triples);
}

}  // namespace

absl::StatusOr<int64_t> ReadIntAttr(Id loc, const char* name, const std::string& file,
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

absl::StatusOr<uint64_t> ReadUintAttr(Id loc, const char* name, const std::string& file,
                                      const std::string& label) {
  ASSIGN_OR_RETURN(Handle a, OpenAttr(loc, name, file, label, H5T_INTEGER));
  uint64_t v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_UINT64, &v) < 0) {
    return AttrError(file, WithLastError("cannot read attribute " + label));
  }
  return v;
}

absl::StatusOr<std::string> ReadStringAttr(Id loc, const char* name, const std::string& file,
                                           const std::string& label) {
  ASSIGN_OR_RETURN(Handle a, OpenAttr(loc, name, file, label, H5T_STRING));
  Handle type = TypeHandle(H5Aget_type(a.get()));
  if (H5Tis_variable_str(type.get()) > 0) {
    // Checked first: reading it makes HDF5 parse the heap that holds it.
    RETURN_IF_ERROR(VerifyStringAttrs(loc, file, label));
    std::string v;
    if (!ReadVariableString(a.get(), type.get(), &v)) {
      return AttrError(file, WithLastError("cannot read attribute " + label));
    }
    return v;
  }
  // The memory type is a copy of the file type, so the character set (ASCII or UTF-8,
  // which HDF5 does not convert between) always matches.
  Handle mem = TypeHandle(H5Tcopy(type.get()));
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

absl::Status WriteIntAttr(Id loc, const char* name, int64_t value) {
  return WriteScalarAttr(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

absl::Status WriteUintAttr(Id loc, const char* name, uint64_t value) {
  return WriteScalarAttr(loc, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &value);
}

absl::Status WriteStringAttr(Id loc, const char* name, const std::string& value) {
  if (std::strcmp(name, kStringChecksumAttr) == 0 || std::strcmp(name, kStringHeapsAttr) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute ", name, " holds the string attributes' checksum"));
  }
  if (value.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute ", name, ": a string attribute cannot hold a NUL byte"));
  }
  Handle type = VariableStringType();
  const char* p = value.c_str();
  RETURN_IF_ERROR(WriteScalarAttr(loc, name, type.get(), type.get(), &p));
  return UpdateStringChecksum(loc);
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

absl::StatusOr<Handle> OpenChecked(Id file_id, const std::string& file, const char* name,
                                   Dtype dtype, const std::vector<int64_t>& expected_dims,
                                   std::vector<int64_t>* dims) {
  if (!LinkExists(file_id, name)) return DatasetError(file, name, "dataset is missing");
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
  ASSIGN_OR_RETURN(std::vector<uint64_t> extents, Extents(space.get(), file, name));
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

absl::StatusOr<std::vector<uint64_t>> ArrayExtents(Id dset, Dtype dtype, const std::string& file,
                                                   const std::string& label) {
  auto corrupt = [&file](const std::string& what) {
    return absl::DataLossError(absl::StrCat(file, ": ", what));
  };
  Handle type = TypeHandle(H5Dget_type(dset));
  if (!TypeMatches(type.get(), dtype)) return corrupt(label + " is not " + DtypeName(dtype));
  Handle space = SpaceHandle(H5Dget_space(dset));
  const int rank = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  if (rank < 1 || rank > kMaxRank) {
    return corrupt(absl::StrFormat("%s is not an array of rank 1 to %d", label, kMaxRank));
  }
  return Extents(space.get(), file, label);
}

absl::Status ReadAll(Id dset, const std::string& file, const char* name, Dtype dtype, void* out) {
  if (H5Dread(dset, MemType(dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) {
    return DatasetError(file, name, "read failed (truncated or corrupt data)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ReadStrings(Id dset, const std::string& file,
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

absl::Status WriteDataset(Id loc, const char* name, const std::string& label, Dtype dtype,
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

absl::Status WriteStrings(Id loc, const char* name, const std::vector<std::string>& values) {
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
