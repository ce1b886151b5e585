#!/usr/bin/env bash
# The one HDF5 layer (issue 33, docs/ARCHITECTURE.md): every HDF5 call of src/ is in
# src/hdf5. No other source includes <hdf5.h> or names HDF5's C API: its functions
# (H5Fopen, H5Dread, ...), constants (H5P_DEFAULT, H5S_ALL, ...) or types (hid_t,
# hsize_t, ...). Tests may craft files with the C API directly.
#   scripts/check_hdf5_layer.sh      exit 0: none; 1: the lines that do
set -uo pipefail
cd "$(dirname "$0")/.."
pattern='#[[:space:]]*include[[:space:]]*[<"]hdf5\.h[>"]|\bH5[A-Z]?_[A-Za-z0-9_]+|\bH5[A-Z][a-z_0-9]+[[:space:]]*\(|\b(hid_t|hsize_t|hssize_t|herr_t|htri_t)\b'
hits=$(grep -rnE "$pattern" src --include='*.cc' --include='*.h' --include='*.cu' --include='*.cuh' |
       grep -v '^src/hdf5/')
if [ -n "$hits" ]; then
  echo "HDF5's C API outside src/hdf5 (add a function to src/hdf5/hdf5.h instead):"
  echo "$hits"
  exit 1
fi
echo "no HDF5 call outside src/hdf5"
