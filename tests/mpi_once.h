// Test binaries that use MPI initialise it on first use and finalise it at exit, so the
// same binary runs alone (one rank) or under mpiexec.
#pragma once

#include <mpi.h>

#include <cstdlib>

namespace kvrl::test_support {

inline void initialize_mpi_once() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);  // as kvrl's ranks do
    std::atexit([] { MPI_Finalize(); });
  }
}

}  // namespace kvrl::test_support
