/* mpi_probe: the MPI program scripts/cluster.sh runs to check and measure a fake cluster.
 *
 * Compiled on first use with mpicc into the cluster's state dir (never into the repo):
 *   mpi_probe where          every rank: its host as the OS and MPI name it, its local rank
 *                            and the size of its shared-memory communicator; then every
 *                            pair of ranks exchanges a message, so that each pair opens its
 *                            BTL connection and btl_base_verbose can name the BTL per pair
 *   mpi_probe pingpong BYTES REPS
 *                            round trips of BYTES between rank 0 and the last rank: median,
 *                            minimum and mean in microseconds
 *   mpi_probe stream MIB     the last rank sends MIB mebibytes to rank 0 in 1 MiB messages;
 *                            the rate as rank 0 received it (shape the last rank's host)
 *   mpi_probe loop SECONDS   an Allreduce every second, for fault tests
 * Rank 0 prints one line per result, "probe ..." with key=value fields, for scripts to parse.
 * Exit status: 0, or 2 on bad arguments. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One rank's identity, gathered to rank 0 as fixed-size bytes. */
typedef struct {
  char host[256];                         /* gethostname(): the fake host's UTS name */
  char processor[MPI_MAX_PROCESSOR_NAME]; /* MPI_Get_processor_name() */
  int local_rank;                         /* OMPI_COMM_WORLD_LOCAL_RANK, -1 when unset */
  int local_size;                         /* OMPI_COMM_WORLD_LOCAL_SIZE, -1 when unset */
  int shm_size;                           /* size of MPI_COMM_TYPE_SHARED: the ranks MPI puts on this node */
  int marker_seen;                        /* whether PROBE_ENV_MARKER reached this rank */
} Identity;

static int env_int(const char* name) {
  const char* value = getenv(name);
  return value ? atoi(value) : -1;
}

static int where(int rank, int size) {
  Identity me;
  memset(&me, 0, sizeof me);
  gethostname(me.host, sizeof me.host - 1);
  int len = 0;
  MPI_Get_processor_name(me.processor, &len);
  me.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK");
  me.local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE");
  me.marker_seen = getenv("PROBE_ENV_MARKER") != NULL;
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &me.shm_size);
  MPI_Comm_free(&node);

  Identity* all = rank == 0 ? calloc((size_t)size, sizeof *all) : NULL;
  MPI_Gather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, 0, MPI_COMM_WORLD);
  /* Collectives may route through a few peers only: send to every peer so that every pair
   * connects and the BTL log names the transport of each. */
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    int out = rank, in = -1;
    MPI_Sendrecv(&out, 1, MPI_INT, peer, 7, &in, 1, MPI_INT, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (in != peer) {
      fprintf(stderr, "probe: rank %d got %d from rank %d\n", rank, in, peer);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  if (rank == 0) {
    for (int r = 0; r < size; ++r)
      printf("probe where rank=%d host=%s processor=%s local_rank=%d local_size=%d shm_size=%d marker=%d\n",
             r, all[r].host, all[r].processor, all[r].local_rank, all[r].local_size, all[r].shm_size,
             all[r].marker_seen);
    free(all);
  }
  return 0;
}

static int compare_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static int pingpong(int rank, int size, long bytes, int reps) {
  const int peer = size - 1;
  char* buffer = calloc((size_t)bytes + 1, 1);
  double* round_trips = calloc((size_t)reps, sizeof *round_trips);
  const int warmup = 3;
  for (int i = -warmup; i < reps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    if (rank == 0) {
      MPI_Send(buffer, (int)bytes, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
      MPI_Recv(buffer, (int)bytes, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == peer) {
      MPI_Recv(buffer, (int)bytes, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buffer, (int)bytes, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
    }
    if (i >= 0) round_trips[i] = (MPI_Wtime() - start) * 1e6;
  }
  if (rank == 0) {
    double sum = 0;
    for (int i = 0; i < reps; ++i) sum += round_trips[i];
    qsort(round_trips, (size_t)reps, sizeof *round_trips, compare_double);
    printf("probe pingpong bytes=%ld reps=%d peer=%d median_us=%.1f min_us=%.1f mean_us=%.1f\n", bytes, reps,
           peer, round_trips[reps / 2], round_trips[0], sum / reps);
  }
  free(round_trips);
  free(buffer);
  return 0;
}

static int stream(int rank, int size, int mib) {
  const int peer = size - 1, chunk = 1 << 20;
  char* buffer = calloc((size_t)chunk, 1);
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int i = 0; i < mib; ++i) {
    if (rank == peer) MPI_Send(buffer, chunk, MPI_CHAR, 0, 2, MPI_COMM_WORLD);
    if (rank == 0) MPI_Recv(buffer, chunk, MPI_CHAR, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  const double seconds = MPI_Wtime() - start;
  if (rank == 0)
    printf("probe stream mib=%d from=%d seconds=%.3f mbit_per_s=%.1f\n", mib, peer, seconds,
           mib * 8.0 * chunk / 1e6 / seconds);
  free(buffer);
  return 0;
}

static int loop(int rank, int seconds) {
  for (int i = 0; i < seconds; ++i) {
    int one = 1, sum = 0;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
      printf("probe loop i=%d sum=%d\n", i, sum);
      fflush(stdout);
    }
    sleep(1);
  }
  return 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* mode = argc > 1 ? argv[1] : "";
  int status = 2;
  if (strcmp(mode, "where") == 0) {
    status = where(rank, size);
  } else if (strcmp(mode, "pingpong") == 0 && argc == 4 && size > 1 && atol(argv[2]) >= 0 &&
             atoi(argv[3]) > 0) {
    status = pingpong(rank, size, atol(argv[2]), atoi(argv[3]));
  } else if (strcmp(mode, "stream") == 0 && argc == 3 && size > 1 && atoi(argv[2]) > 0) {
    status = stream(rank, size, atoi(argv[2]));
  } else if (strcmp(mode, "loop") == 0 && argc == 3) {
    status = loop(rank, atoi(argv[2]));
  } else if (rank == 0) {
    fprintf(stderr,
            "usage: mpi_probe where | pingpong BYTES REPS | stream MIB | loop SECONDS "
            "(pingpong and stream need 2 ranks or more)\n");
  }
  fflush(stdout);
  MPI_Finalize();
  return status;
}
