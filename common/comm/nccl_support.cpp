#include "common/comm/nccl_support.h"

#include "common/comm/mpi_check.h"
#include "common/support/errors.h"

namespace kvrl {

void check_nccl(ncclResult_t result, const char* call, const char* file, int line,
                const std::string& reason) {
  if (result == ncclSuccess) return;
  throw Error(failed_call_message(call, file, line, ncclGetErrorString(result), reason));
}

ncclComm_t nccl_comm_over_mpi(MPI_Comm members, int rank, int size, const std::string& purpose) {
  ncclUniqueId id;
  if (rank == 0) KVRL_NCCL_CHECK(ncclGetUniqueId(&id), "creating the " + purpose + " unique id");
  KVRL_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, members), "broadcasting the NCCL unique id");
  ncclComm_t comm = nullptr;
  KVRL_NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank), "creating the " + purpose + " communicator");
  return comm;
}

std::string nccl_async_error(ncclComm_t comm) {
  ncclResult_t async_error = ncclSuccess;
  KVRL_NCCL_CHECK(ncclCommGetAsyncError(comm, &async_error), "reading the async error");
  return async_error == ncclSuccess ? std::string() : ncclGetErrorString(async_error);
}

}  // namespace kvrl
