// Every MPI call goes through KVRL_MPI_CHECK, which turns a failure into an MpiError
// naming the call, file:line, rank and host, MPI's own error string and the caller's
// reason (as c10d's C10D_NCCL_CHECK does for NCCL).
#pragma once

#include <mpi.h>

#include <string>

#include "common/support/errors.h"

namespace kvrl {

class MpiError : public Error {
 public:
  using Error::Error;
};

// Throws MpiError when `code` is not MPI_SUCCESS.
void check_mpi(int code, const char* call, const char* file, int line, const std::string& reason);

// "CALL failed at FILE:LINE on rank R (HOST): PROBLEM; while REASON", R the rank in
// MPI_COMM_WORLD: the wording of every failed MPI or NCCL call.
std::string failed_call_message(const char* call, const char* file, int line, const std::string& problem,
                                const std::string& reason);

}  // namespace kvrl

#define KVRL_MPI_CHECK(call, reason) ::kvrl::check_mpi((call), #call, __FILE__, __LINE__, (reason))
