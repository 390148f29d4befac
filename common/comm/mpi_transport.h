// The Transport (common/comm/transport.h) over MPI, without blocking the caller: send()
// starts an MPI_Isend and keeps the buffer until it completes; poll() returns the next
// message that has arrived, if any. One thread per rank calls it (MPI is initialised
// with MPI_THREAD_FUNNELED). The learners' collectives over MPI are MpiCommunicator.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "common/comm/transport.h"

namespace kvrl {

class MpiTransport : public Transport {
 public:
  explicit MpiTransport(MPI_Comm comm);
  ~MpiTransport() override;  // waits for pending sends: call flush() first where a peer may be gone
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Starts sending; never blocks. Throws MpiError.
  void send(int destination, MessageTag tag, std::vector<uint8_t> bytes) override;
  // The next arrived message from any rank, or nothing; never blocks. Throws MpiError.
  std::optional<Message> poll() override;
  // Frees the buffers of completed sends; returns how many are still in flight.
  size_t progress() override;
  // Blocks until every send has completed (the receivers must be receiving).
  void flush() override;

 private:
  struct PendingSend {
    MPI_Request request;
    std::vector<uint8_t> bytes;
  };
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 0;
  std::deque<PendingSend> pending_;
};

}  // namespace kvrl
