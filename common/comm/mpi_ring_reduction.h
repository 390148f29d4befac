// The learners' gradient mean over MPI as a ring: a reduce-scatter, then an all-gather, in
// point-to-point steps (as NCCL and Open MPI's large-message all-reduce do it). Every link
// carries 2(p-1)/p of the buffer in each direction at once, where a reduce to one rank and
// a broadcast back leave each direction idle half the time (at most half the link's rate
// between two hosts). Each slice is summed on one rank only and then copied, so every
// rank holds the same bits, which MPI_Allreduce does not promise.
#pragma once

#include <mpi.h>

#include <memory>

#include "common/comm/communicator.h"

namespace kvrl {

// Starts replacing the 1-d `flat` (any device) by its mean over the ranks of `comm`; steps
// advance in progress() and wait(). Every rank starts its reductions in the same order with
// the same `tag`, a tag no other message in flight on `comm` uses.
std::unique_ptr<PendingReduction> start_ring_mean(at::Tensor flat, MPI_Comm comm, int tag);

}  // namespace kvrl
