// The build's identity for --version: the git commit the program was built from, read at
// build time (cmake/version.cmake writes it into the build tree on every build, so a
// rebuild after a new commit reports that commit), "unknown" outside a git checkout.
#pragma once

namespace colonnade {

// "4d0485d" or "4d0485d-dirty" (uncommitted changes), or "unknown".
const char* BuildCommit();

}  // namespace colonnade
