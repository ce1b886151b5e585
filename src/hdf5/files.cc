// Files, groups and links of the HDF5 layer (hdf5.h): files created and opened with the
// project's properties, and the walk of a group that readers of user files make.
#include <hdf5.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/paths.h"
#include "core/status_macros.h"
#include "hdf5/hdf5.h"

namespace colonnade::hdf5 {
namespace {

absl::Status Corrupt(const std::string& file, const std::string& what) {
  return absl::DataLossError(absl::StrCat(file, ": ", what));
}

// Remember the creation order of links, and index it (so that it can be iterated in it).
constexpr unsigned kLinkOrder = H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED;

}  // namespace

// ---- files ---------------------------------------------------------------------------------

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

absl::StatusOr<Handle> OpenFileReadOnlyStrongClose(const std::string& path) {
  Handle fapl = PlistHandle(H5Pcreate(H5P_FILE_ACCESS));
  H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG);
  Handle file = FileHandle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()));
  if (!file.valid()) {
    return Corrupt(path, WithLastError("not a readable HDF5 file (truncated or corrupt)"));
  }
  return file;
}

bool IsHdf5File(const std::string& path) { return H5Fis_hdf5(path.c_str()) > 0; }

absl::StatusOr<Handle> CreateFile(const std::string& path, const FileOptions& o) {
  Handle fapl;
  if (o.format_v110) {
    fapl = PlistHandle(H5Pcreate(H5P_FILE_ACCESS));
    if (H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_V110) < 0) {
      return absl::InternalError(WithLastError("file format bounds"));
    }
  }
  Handle fcpl = PlistHandle(H5Pcreate(H5P_FILE_CREATE));
  if (o.link_creation_order) H5Pset_link_creation_order(fcpl.get(), kLinkOrder);
  H5Pset_obj_track_times(fcpl.get(), false);  // no timestamps: byte-identical reruns
  Handle f = FileHandle(H5Fcreate(path.c_str(), o.exclusive ? H5F_ACC_EXCL : H5F_ACC_TRUNC,
                                  fcpl.get(), fapl.valid() ? fapl.get() : H5P_DEFAULT));
  if (!f.valid()) return absl::PermissionDeniedError(WithLastError("creating the file"));
  return f;
}

absl::Status Flush(Id loc) {
  if (H5Fflush(loc, H5F_SCOPE_LOCAL) < 0) {
    return absl::InternalError(WithLastError("flushing the file"));
  }
  return absl::OkStatus();
}

int64_t FileSizeOf(Id loc) {
  Handle file = FileHandle(H5Iget_file_id(loc));
  hsize_t size = 0;
  if (!file.valid() || H5Fget_filesize(file.get(), &size) < 0) return -1;
  return static_cast<int64_t>(size);
}

// ---- groups and links ----------------------------------------------------------------------

bool LinkExists(Id loc, const char* name) { return H5Lexists(loc, name, H5P_DEFAULT) > 0; }

int64_t LinkCount(Id loc) {
  H5G_info_t info;
  if (H5Gget_info(loc, &info) < 0) return -1;
  return static_cast<int64_t>(info.nlinks);
}

int AttrExists(Id loc, const char* name) {
  const htri_t exists = H5Aexists(loc, name);
  return exists < 0 ? -1 : exists > 0 ? 1 : 0;
}

absl::StatusOr<Handle> OpenOrCreateGroup(Id loc, const std::string& name) {
  if (LinkExists(loc, name.c_str())) {
    Handle g = GroupHandle(H5Gopen2(loc, name.c_str(), H5P_DEFAULT));
    if (!g.valid()) return absl::InternalError(WithLastError("opening group " + name));
    return g;
  }
  Handle gcpl = PlistHandle(H5Pcreate(H5P_GROUP_CREATE));
  H5Pset_link_creation_order(gcpl.get(), kLinkOrder);
  H5Pset_obj_track_times(gcpl.get(), false);  // no timestamps: byte-identical reruns
  Handle g = GroupHandle(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT));
  if (!g.valid()) return absl::InternalError(WithLastError("creating group " + name));
  return g;
}

absl::StatusOr<std::vector<std::string>> ListHardLinks(Id group, const std::string& file,
                                                       const std::string& label) {
  H5G_info_t info;
  if (H5Gget_info(group, &info) < 0) {
    return Corrupt(file, WithLastError("cannot list group " + label));
  }
  H5_index_t index = H5_INDEX_NAME;
  {
    Handle gcpl = PlistHandle(H5Gget_create_plist(group));
    unsigned flags = 0;
    if (gcpl.valid() && H5Pget_link_creation_order(gcpl.get(), &flags) >= 0 &&
        (flags & H5P_CRT_ORDER_TRACKED)) {
      index = H5_INDEX_CRT_ORDER;
    }
  }
  std::vector<std::string> out;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    ssize_t len = H5Lget_name_by_idx(group, ".", index, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (len < 0) return Corrupt(file, WithLastError("cannot list group " + label));
    std::string name(static_cast<size_t>(len) + 1, '\0');
    if (H5Lget_name_by_idx(group, ".", index, H5_ITER_INC, i, name.data(), name.size(),
                           H5P_DEFAULT) < 0) {
      return Corrupt(file, WithLastError("cannot list group " + label));
    }
    name.resize(static_cast<size_t>(len));
    H5L_info_t li;
    if (H5Lget_info(group, name.c_str(), &li, H5P_DEFAULT) < 0) {
      return Corrupt(file, WithLastError("cannot read link " + label + name));
    }
    if (li.type != H5L_TYPE_HARD) {
      return Corrupt(
          file, absl::StrFormat("%s%s is a soft or external link, not stored data", label, name));
    }
    out.push_back(std::move(name));
  }
  return out;
}

absl::StatusOr<Handle> OpenObject(Id loc, const std::string& name, ObjectType want,
                                  const std::string& file, const std::string& label) {
  Handle o = ObjectHandle(H5Oopen(loc, name.c_str(), H5P_DEFAULT));
  if (!o.valid()) return Corrupt(file, WithLastError("cannot open " + label));
  const H5I_type_t t = H5Iget_type(o.get());
  if (want == ObjectType::kGroup && t != H5I_GROUP) return Corrupt(file, label + " is not a group");
  if (want == ObjectType::kDataset && t != H5I_DATASET) {
    return Corrupt(file, label + " is not a dataset");
  }
  return o;
}

}  // namespace colonnade::hdf5
