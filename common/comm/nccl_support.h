// What the NCCL classes share (built with kvrl's CUDA paths only): the checked call,
// a communicator bootstrapped over MPI, and the asynchronous error read.
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <string>

namespace kvrl {

// Throws Error naming the call, file:line, the rank in MPI_COMM_WORLD and its host, NCCL's
// error string and the caller's reason when `result` is not ncclSuccess.
void check_nccl(ncclResult_t result, const char* call, const char* file, int line, const std::string& reason);

// A communicator over the MPI communicator `members`: its rank 0 creates the unique id
// and broadcasts it over MPI. `purpose` names it in errors.
ncclComm_t nccl_comm_over_mpi(MPI_Comm members, int rank, int size, const std::string& purpose);

// The communicator's asynchronous error, or "" when there is none.
std::string nccl_async_error(ncclComm_t comm);

}  // namespace kvrl

#define KVRL_NCCL_CHECK(call, reason) ::kvrl::check_nccl((call), #call, __FILE__, __LINE__, (reason))
