// Chunked datasets of the HDF5 layer (hdf5.h): written and read in blocks of rows (shards'
// /images), and checked and read with a Fletcher-32 checksum on every chunk (checkpoints'
// tensors).
#include <hdf5.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hdf5/hdf5.h"

namespace colonnade::hdf5 {
namespace {

absl::Status Corrupt(const std::string& file, const std::string& what) {
  return absl::DataLossError(absl::StrCat(file, ": ", what));
}

// Selects the block (`start`, `count`) of dataspace `space` and returns a dataspace of the
// block's own extents for memory; an invalid handle when the rank is not 1 to kMaxRank.
Handle SelectBlock(Id space, absl::Span<const int64_t> start, absl::Span<const int64_t> count) {
  const int rank = static_cast<int>(count.size());
  if (start.size() != count.size() || rank < 1 || rank > kMaxRank) return Handle();
  hsize_t s[kMaxRank], c[kMaxRank];
  for (int i = 0; i < rank; ++i) {
    s[i] = static_cast<hsize_t>(start[i]);
    c[i] = static_cast<hsize_t>(count[i]);
  }
  H5Sselect_hyperslab(space, H5S_SELECT_SET, s, nullptr, c, nullptr);
  return SpaceHandle(H5Screate_simple(rank, c, nullptr));
}

}  // namespace

// ---- blocks of rows ------------------------------------------------------------------------

absl::StatusOr<Handle> CreateGrowableDataset(Id loc, const char* name, Dtype dtype,
                                             const std::vector<int64_t>& dims) {
  const int rank = static_cast<int>(dims.size());
  if (dtype == Dtype::kString || rank < 1 || rank > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not a growable array"));
  }
  std::vector<hsize_t> extents(dims.begin(), dims.end()), max = extents, chunk = extents;
  max[0] = H5S_UNLIMITED;
  chunk[0] = 1;  // one row per chunk: a row is one contiguous read, with nothing to decode
  Handle space = SpaceHandle(H5Screate_simple(rank, extents.data(), max.data()));
  Handle dcpl = PlistHandle(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_chunk(dcpl.get(), rank, chunk.data());
  H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);
  H5Pset_obj_track_times(dcpl.get(), false);  // no timestamps: byte-identical reruns
  Handle dset = DatasetHandle(
      H5Dcreate2(loc, name, FileType(dtype), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
  if (!dset.valid()) {
    return absl::InternalError(WithLastError(absl::StrCat(name, ": cannot create dataset")));
  }
  return dset;
}

absl::Status SetExtent(Id dset, const std::vector<int64_t>& dims) {
  const std::vector<hsize_t> extents(dims.begin(), dims.end());
  if (H5Dset_extent(dset, extents.data()) < 0) {
    return absl::InternalError(WithLastError("cannot set extent"));
  }
  return absl::OkStatus();
}

absl::Status WriteBlock(Id dset, absl::Span<const int64_t> start, absl::Span<const int64_t> count,
                        Dtype dtype, const void* data) {
  Handle fspace = SpaceHandle(H5Dget_space(dset));
  Handle mspace = SelectBlock(fspace.get(), start, count);
  if (!mspace.valid() ||
      H5Dwrite(dset, MemType(dtype), mspace.get(), fspace.get(), H5P_DEFAULT, data) < 0) {
    return absl::InternalError(WithLastError("write failed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DatasetReader> DatasetReader::Open(Id file, const char* name) {
  Handle dapl = PlistHandle(H5Pcreate(H5P_DATASET_ACCESS));
  H5Pset_chunk_cache(dapl.get(), 0, 0, H5D_CHUNK_CACHE_W0_DEFAULT);  // no chunk cache
  DatasetReader r;
  r.dset_ = DatasetHandle(H5Dopen2(file, name, dapl.get()));
  if (!r.dset_.valid()) {
    return absl::DataLossError(WithLastError(absl::StrCat(name, ": cannot open")));
  }
  r.space_ = SpaceHandle(H5Dget_space(r.dset_.get()));
  return r;
}

int64_t DatasetReader::Elements() const {
  return static_cast<int64_t>(H5Sget_simple_extent_npoints(space_.get()));
}

absl::Status DatasetReader::ReadAll(Dtype dtype, void* out) {
  if (H5Dread(dset_.get(), MemType(dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) {
    return absl::DataLossError(WithLastError("read failed"));
  }
  return absl::OkStatus();
}

absl::Status DatasetReader::ReadBlock(absl::Span<const int64_t> start,
                                      absl::Span<const int64_t> count, Dtype dtype, void* out) {
  Handle mspace = SelectBlock(space_.get(), start, count);
  if (!mspace.valid() ||
      H5Dread(dset_.get(), MemType(dtype), mspace.get(), space_.get(), H5P_DEFAULT, out) < 0) {
    return absl::DataLossError(WithLastError("read failed"));
  }
  return absl::OkStatus();
}

// ---- checksummed chunks --------------------------------------------------------------------

absl::Status CheckChecksummedChunks(Id dset, const std::vector<uint64_t>& dims,
                                    const std::string& file, const std::string& label) {
  Handle dcpl = PlistHandle(H5Dget_create_plist(dset));
  if (!dcpl.valid() || H5Pget_layout(dcpl.get()) != H5D_CHUNKED) {
    return Corrupt(file, label + " is not chunked, so it has no Fletcher-32 checksum");
  }
  unsigned flags = 0, config = 0;
  size_t nelmts = 0;
  if (H5Pget_filter_by_id2(dcpl.get(), H5Z_FILTER_FLETCHER32, &flags, &nelmts, nullptr, 0, nullptr,
                           &config) < 0) {
    return Corrupt(file, label + " has no Fletcher-32 checksum filter");
  }
  if (H5Pget_nfilters(dcpl.get()) != 1) {
    return Corrupt(file, label +
                             " has HDF5 filters besides Fletcher-32 (compression?); the "
                             "format stores tensors uncompressed");
  }
  const int rank = static_cast<int>(dims.size());
  std::vector<hsize_t> chunk(rank);
  if (H5Pget_chunk(dcpl.get(), rank, chunk.data()) != rank) {
    return Corrupt(file, WithLastError(label + ": cannot read its chunk shape"));
  }
  hsize_t want_chunks = 1;  // at most the element count (every chunk dim >= 1): no overflow
  for (int i = 0; i < rank; ++i) {
    if (chunk[i] < 1) return Corrupt(file, label + " has an empty chunk shape");
    want_chunks *= (dims[i] + chunk[i] - 1) / chunk[i];
  }
  Handle space = SpaceHandle(H5Dget_space(dset));
  hsize_t have_chunks = 0;
  if (H5Dget_num_chunks(dset, space.get(), &have_chunks) < 0) {
    return Corrupt(file, WithLastError(label + ": cannot read its chunk index"));
  }
  if (have_chunks != want_chunks) {
    return Corrupt(file, absl::StrFormat("%s stores %d of its %d chunks (data never written)",
                                         label, have_chunks, want_chunks));
  }
  return absl::OkStatus();
}

absl::Status ReadChecksummed(Id dset, const std::string& file, const std::string& label,
                             Dtype dtype, void* out) {
  Handle dxpl = PlistHandle(H5Pcreate(H5P_DATASET_XFER));
  H5Pset_edc_check(dxpl.get(), H5Z_ENABLE_EDC);
  if (H5Dread(dset, MemType(dtype), H5S_ALL, H5S_ALL, dxpl.get(), out) < 0) {
    return Corrupt(file, WithLastError(label + ": cannot read the data, the file is corrupt"));
  }
  return absl::OkStatus();
}

}  // namespace colonnade::hdf5
