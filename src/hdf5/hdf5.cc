#include "hdf5/hdf5.h"

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace colonnade::hdf5 {

// hdf5.h names HDF5's types without including <hdf5.h>.
static_assert(std::is_same_v<Id, hid_t>, "hdf5::Id must be HDF5's hid_t");
static_assert(std::is_same_v<Handle::Closer, herr_t (*)(hid_t)>, "Closer must take H5?close");
static_assert(kMaxRank == H5S_MAX_RANK, "kMaxRank must be HDF5's H5S_MAX_RANK");

Handle FileHandle(Id id) { return Handle(id, H5Fclose); }
Handle GroupHandle(Id id) { return Handle(id, H5Gclose); }
Handle DatasetHandle(Id id) { return Handle(id, H5Dclose); }
Handle SpaceHandle(Id id) { return Handle(id, H5Sclose); }
Handle TypeHandle(Id id) { return Handle(id, H5Tclose); }
Handle PlistHandle(Id id) { return Handle(id, H5Pclose); }
Handle AttrHandle(Id id) { return Handle(id, H5Aclose); }
Handle ObjectHandle(Id id) { return Handle(id, H5Oclose); }

namespace {

std::recursive_mutex& Mutex() {
  static std::recursive_mutex* mu = new std::recursive_mutex();  // leaked: used at exit
  return *mu;
}

herr_t InnermostCallback(unsigned n, const H5E_error2_t* err, void* data) {
  // H5E_WALK_UPWARD visits the innermost (most specific) error first.
  auto* out = static_cast<std::string*>(data);
  if (n == 0 && err != nullptr && err->desc != nullptr) *out = err->desc;
  return 0;
}

// a * b, or false when it does not fit in 63 bits (claims that large are never real).
bool CheckedMul(uint64_t a, uint64_t b, uint64_t* out) {
  constexpr uint64_t kMax = static_cast<uint64_t>(INT64_MAX);
  if (a != 0 && b > kMax / a) return false;
  *out = a * b;
  return true;
}

}  // namespace

bool CheckedByteCount(const std::vector<uint64_t>& dims, uint64_t element_bytes, int64_t* bytes) {
  uint64_t n = 1;
  for (uint64_t d : dims) {
    if (!CheckedMul(n, d, &n)) return false;
  }
  if (!CheckedMul(n, element_bytes, &n)) return false;
  *bytes = static_cast<int64_t>(n);
  return true;
}

void SilenceErrorPrinting() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

namespace {
// The main thread's setting, made before main() runs (see hdf5.h). This object file is
// linked into every program that uses Scope, so the initialiser always runs with it.
[[maybe_unused]] const bool kMainThreadSilenced = (SilenceErrorPrinting(), true);
}  // namespace

Scope::Scope() : lock_(Mutex()) { SilenceErrorPrinting(); }

std::string LastError() {
  std::string s;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, InnermostCallback, &s);
  return s;
}

std::string NonHardLinkReason(Id loc, const char* name) {
  H5L_info_t info;
  if (H5Lget_info(loc, name, &info, H5P_DEFAULT) < 0) return "cannot be read as a link";
  if (info.type == H5L_TYPE_HARD) return "";
  std::string target;
  if (info.type == H5L_TYPE_SOFT || info.type == H5L_TYPE_EXTERNAL) {
    std::vector<char> buf(info.u.val_size + 1, '\0');
    if (H5Lget_val(loc, name, buf.data(), buf.size(), H5P_DEFAULT) >= 0) {
      if (info.type == H5L_TYPE_SOFT) {
        target = buf.data();
      } else {
        unsigned flags = 0;
        const char* file = nullptr;
        const char* object = nullptr;
        if (H5Lunpack_elink_val(buf.data(), buf.size(), &flags, &file, &object) >= 0) {
          target = std::string(file ? file : "?") + ":" + (object ? object : "?");
        }
      }
    }
  }
  const char* kind = info.type == H5L_TYPE_SOFT       ? "a soft link"
                     : info.type == H5L_TYPE_EXTERNAL ? "an external link"
                                                      : "a user-defined link";
  std::string reason = std::string("is ") + kind;
  if (!target.empty()) reason += " to '" + target + "'";
  return reason + ", not data stored in this file (links are refused)";
}

std::string MissingStorageReason(Id dset) {
  Handle dcpl(H5Dget_create_plist(dset), H5Pclose);
  if (!dcpl.valid()) return "has unreadable creation properties";
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout == H5D_VIRTUAL) {
    return "is a virtual dataset: its data lives in other files (refused)";
  }
  if (H5Pget_external_count(dcpl.get()) != 0) {
    return "keeps its data in external raw files (refused)";
  }
  if (layout != H5D_CONTIGUOUS && layout != H5D_CHUNKED && layout != H5D_COMPACT) {
    return "has an unknown storage layout";
  }
  Handle space(H5Dget_space(dset), H5Sclose);
  Handle type(H5Dget_type(dset), H5Tclose);
  const int rank = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  if (rank < 0 || !type.valid()) return "has an unreadable shape or type";
  std::vector<hsize_t> dims(rank);
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  uint64_t elements = 1;
  for (hsize_t d : dims) {
    if (!CheckedMul(elements, d, &elements)) return "claims more than 2^63 elements";
  }
  uint64_t bytes = 0;
  if (!CheckedMul(elements, H5Tget_size(type.get()), &bytes)) {
    return "claims more than 2^63 bytes";
  }
  if (elements == 0 || layout == H5D_COMPACT) return "";  // compact: inside the header
  H5D_space_status_t status = H5D_SPACE_STATUS_ERROR;
  if (H5Dget_space_status(dset, &status) < 0) return "has unreadable storage information";
  if (status == H5D_SPACE_STATUS_NOT_ALLOCATED) {
    return "was never written (no storage is allocated for its " + std::to_string(elements) +
           " elements, which would read back as zeros)";
  }
  const uint64_t storage = H5Dget_storage_size(dset);
  if (layout == H5D_CONTIGUOUS && storage < bytes) {
    return "holds " + std::to_string(storage) + " bytes, but its shape claims " +
           std::to_string(bytes);
  }
  if (layout == H5D_CHUNKED) {
    std::vector<hsize_t> chunk(rank);
    if (H5Pget_chunk(dcpl.get(), rank, chunk.data()) != rank) return "has unreadable chunking";
    uint64_t expected = 1;
    for (int i = 0; i < rank; ++i) {
      if (chunk[i] == 0) return "has a chunk dimension of 0";
      if (!CheckedMul(expected, (dims[i] + chunk[i] - 1) / chunk[i], &expected)) {
        return "claims more than 2^63 chunks";
      }
    }
    hsize_t written = 0;
    if (H5Dget_num_chunks(dset, space.get(), &written) < 0) {
      return "has an unreadable chunk index (" + LastError() + ")";
    }
    if (written < expected) {
      return "has only " + std::to_string(written) + " of its " + std::to_string(expected) +
             " chunks written (the others would read back as zeros)";
    }
  }
  // Stored bytes must exist in the file (HDF5 checks its end-of-file mark on open; this also
  // catches a chunk index that points past the end).
  hid_t file = H5Iget_file_id(dset);
  if (file >= 0) {
    hsize_t file_size = 0;
    const bool known = H5Fget_filesize(file, &file_size) >= 0;
    H5Fclose(file);
    if (known && storage > file_size) {
      return "claims " + std::to_string(storage) + " bytes of storage, more than the file's " +
             std::to_string(file_size);
    }
  }
  return "";
}

}  // namespace colonnade::hdf5
