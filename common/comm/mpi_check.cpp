#include "common/comm/mpi_check.h"

#include <unistd.h>

namespace kvrl {

std::string failed_call_message(const char* call, const char* file, int line, const std::string& problem,
                                const std::string& reason) {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return std::string(call) + " failed at " + file + ":" + std::to_string(line) + " on rank " +
         std::to_string(rank) + " (" + host + "): " + problem + "; while " + reason;
}

void check_mpi(int code, const char* call, const char* file, int line, const std::string& reason) {
  if (code == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, message, &length);
  throw MpiError(failed_call_message(call, file, line, std::string(message, length), reason));
}

}  // namespace kvrl
