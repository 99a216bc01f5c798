// Status propagation macros (Debian's Abseil 20220623 has none of its own).
//
//   TPX_RETURN_IF_ERROR(DoThing());
//   TPX_ASSIGN_OR_RETURN(Tensor t, MakeTensor(...));
#ifndef TPX_CORE_STATUS_MACROS_H_
#define TPX_CORE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TPX_STATUS_CONCAT_INNER_(a, b) a##b
#define TPX_STATUS_CONCAT_(a, b) TPX_STATUS_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define TPX_RETURN_IF_ERROR(expr)                         \
  do {                                                    \
    ::absl::Status tpx_status_ = (expr);                  \
    if (!tpx_status_.ok()) return tpx_status_;            \
  } while (0)

// Evaluates `rexpr` (a StatusOr); returns its status if not OK, else assigns
// the value to `lhs` (which may be a declaration).
#define TPX_ASSIGN_OR_RETURN(lhs, rexpr) \
  TPX_ASSIGN_OR_RETURN_IMPL_(TPX_STATUS_CONCAT_(tpx_statusor_, __LINE__), lhs, rexpr)

#define TPX_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                               \
  if (!statusor.ok()) return statusor.status();          \
  lhs = std::move(statusor).value()

#endif  // TPX_CORE_STATUS_MACROS_H_
