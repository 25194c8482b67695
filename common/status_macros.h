// Early-return helpers for absl::Status, which this Abseil release (20220623) lacks.
//
//   RETURN_IF_ERROR(store.Put(key, value));
//   ASSIGN_OR_RETURN(JobSpec spec, ParseJobSpecJson(text));
#ifndef MTRAIN_COMMON_STATUS_MACROS_H_
#define MTRAIN_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define MTRAIN_CONCAT_INNER_(a, b) a##b
#define MTRAIN_CONCAT_(a, b) MTRAIN_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the caller if it is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    const ::absl::Status mtrain_status_ = (expr);    \
    if (!mtrain_status_.ok()) return mtrain_status_; \
  } while (0)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status, otherwise
// moves the value into `lhs` (a declaration or an assignable expression).
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  MTRAIN_ASSIGN_OR_RETURN_IMPL_(MTRAIN_CONCAT_(mtrain_statusor_, __LINE__), lhs, rexpr)

#define MTRAIN_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                  \
  if (!statusor.ok()) return statusor.status();             \
  lhs = std::move(statusor).value()

#endif  // MTRAIN_COMMON_STATUS_MACROS_H_
