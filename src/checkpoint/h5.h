// Internal HDF5 helpers of the checkpoint module: handle factories over the shared
// src/hdf5 plumbing. Not part of the public API (see checkpoint.h).
#pragma once

#include <hdf5.h>

#include <string>

#include "hdf5/hdf5.h"

namespace colonnade::checkpoint::internal {

// The project-wide HDF5 scope and handle (src/hdf5), under this module's old names.
using H5Scope = ::colonnade::hdf5::Scope;
using Handle = ::colonnade::hdf5::Handle;
using ::colonnade::hdf5::LastError;

inline Handle File(hid_t id) { return Handle(id, H5Fclose); }
inline Handle Group(hid_t id) { return Handle(id, H5Gclose); }
inline Handle Dataset(hid_t id) { return Handle(id, H5Dclose); }
inline Handle Space(hid_t id) { return Handle(id, H5Sclose); }
inline Handle Type(hid_t id) { return Handle(id, H5Tclose); }
inline Handle Plist(hid_t id) { return Handle(id, H5Pclose); }
inline Handle Attr(hid_t id) { return Handle(id, H5Aclose); }
inline Handle Object(hid_t id) { return Handle(id, H5Oclose); }

}  // namespace colonnade::checkpoint::internal
