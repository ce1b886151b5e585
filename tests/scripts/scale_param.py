#!/usr/bin/env python3
"""scale_param.py CHECKPOINT LAYER/PARAM FACTOR: multiplies one parameter of a Colonnade
checkpoint in place (h5py rewrites the Fletcher-32 checksums of the chunks it writes), for
tests that need larger weights than two training steps give."""
import sys

import h5py

path, name, factor = sys.argv[1], sys.argv[2], float(sys.argv[3])
with h5py.File(path, "r+") as f:
    d = f["params/" + name]
    d[...] = d[...] * factor
