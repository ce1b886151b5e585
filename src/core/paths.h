// Paths, directories and the regular-file check, shared by every module that reads or
// writes files (data shards, checkpoints, the tools' outputs). One implementation, on
// std::filesystem, so that directories get one permission rule everywhere.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace colonnade {

// `dir`/`name`; `name` alone when `dir` is empty. `name` is relative (a file or directory
// name of the caller's own making).
std::string JoinPath(const std::string& dir, const std::string& name);

// True when `path` is a directory (symlinks are followed); false when it is missing,
// something else, or cannot be examined.
bool IsDirectory(const std::string& path);

// Creates `dir` and its missing parents (like mkdir -p). New directories get mode 0777
// minus the process's umask, the rule of mkdir(1): the user's umask decides who may read
// a checkpoint or shard directory (022: everyone reads, only the owner writes; 002 on a
// shared project: the group writes too). Checkpoints were created that way, shard
// directories with 0755 minus umask, which overrode a group-writable umask; both now
// follow the umask. OK when `dir` is empty or already a directory. Errors name `what`
// ("checkpoint directory", "output directory"): FailedPrecondition "<what> D is not a
// directory" when something else is there, PermissionDenied "cannot create <what> D:
// <reason>" when it cannot be created.
absl::Status MakeDirs(const std::string& dir, const std::string& what);

// OK for an existing regular file (symlinks are followed). NotFound "path: file not found"
// when nothing is at `path`; FailedPrecondition "path: is a FIFO, not a regular file" for a
// FIFO, socket, device or directory; PermissionDenied when it cannot be examined. Readers
// check before open(): a FIFO blocks open() until a writer appears (forever, for a crafted
// input), and a device such as /dev/zero never ends.
absl::Status CheckRegularFile(const std::string& path);

// The errors of CheckRegularFile, for callers that examine an open descriptor (fstat)
// instead: `e` is the errno of a failed stat/open, `mode` the st_mode of a non-regular file.
absl::Status FileOpenError(const std::string& path, int e);
absl::Status NotRegularFileError(const std::string& path, unsigned mode);

}  // namespace colonnade
