// Early-return helpers for absl::Status / absl::StatusOr, so library code reads as the
// sequence of steps it performs instead of a wall of `if (!s.ok()) return s;`.
//
//   RETURN_IF_ERROR(WriteHeader(file));                 // returns the Status if not OK
//   ASSIGN_OR_RETURN(Shape shape, ReadShape(file, name));  // declares `shape` or returns
//
// Abseil 20220623 (Debian 12) ships neither macro publicly, hence this header.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define COLONNADE_STATUS_CONCAT_INNER(a, b) a##b
#define COLONNADE_STATUS_CONCAT(a, b) COLONNADE_STATUS_CONCAT_INNER(a, b)

// Evaluates `expr` (an absl::Status) once and returns it from the enclosing function if it
// is not OK.
#define RETURN_IF_ERROR(expr)                              \
  do {                                                     \
    ::absl::Status colonnade_status_ = (expr);             \
    if (!colonnade_status_.ok()) return colonnade_status_; \
  } while (0)

// `lhs` is a declaration or an assignable expression; `expr` an absl::StatusOr<T>.
#define ASSIGN_OR_RETURN(lhs, expr) \
  COLONNADE_ASSIGN_OR_RETURN_IMPL(COLONNADE_STATUS_CONCAT(colonnade_or_, __LINE__), lhs, expr)

#define COLONNADE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return tmp.status();                   \
  lhs = std::move(tmp).value()
