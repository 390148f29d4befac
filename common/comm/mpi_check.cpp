#include "common/comm/mpi_check.h"

#include <unistd.h>

namespace kvrl {

void check_mpi(int code, const char* call, const char* file, int line, const std::string& reason) {
  if (code == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, message, &length);
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  throw MpiError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + " on rank " +
                 std::to_string(rank) + " (" + host + "): " + std::string(message, length) + "; while " +
                 reason);
}

}  // namespace kvrl
