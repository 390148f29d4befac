// Point-to-point messages between ranks over MPI, without blocking the caller: send()
// starts an MPI_Isend and keeps the buffer until it completes; poll() returns the next
// message that has arrived, if any. One thread per rank calls it (MPI is initialised
// with MPI_THREAD_FUNNELED). Also the learners' collectives (MpiCommunicator).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "common/communicator.h"

namespace kvrl {

enum class MessageTag : int {
  kEpisode = 1,    // actor -> learner: an encoded Episode
  kCredit = 2,     // learner -> actor: one more episode may be sent
  kWeights = 3,    // learner 0 -> actor: encoded weights with their policy version
  kStop = 4,       // learner -> actor: this learner sends nothing more; stop acting (one byte: RunEnd)
  kActorDone = 5,  // actor -> learner: int64 count of episodes this actor sent to it
  kStopRequest = 6,  // actor -> learner: this actor was asked to stop (a signal); stop the run
  kWeightsAnnounce = 7,  // learner 0 -> actor: a staged weight broadcast of this version follows (16 bytes)
};

// Why a run ended, carried by kStop so that every rank exits with the same status.
enum class RunEnd : uint8_t { kFinished = 0, kInterrupted = 1, kNonFinite = 2 };

struct Message {
  int source = -1;
  MessageTag tag = MessageTag::kEpisode;
  std::vector<uint8_t> bytes;
};

class MpiTransport {
 public:
  explicit MpiTransport(MPI_Comm comm);
  ~MpiTransport();  // waits for pending sends: call flush() first where a peer may be gone
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Starts sending; never blocks. Throws MpiError.
  void send(int destination, MessageTag tag, std::vector<uint8_t> bytes);
  // The next arrived message from any rank, or nothing; never blocks. Throws MpiError.
  std::optional<Message> poll();
  // Frees the buffers of completed sends; returns how many are still in flight.
  size_t progress();
  // Blocks until every send has completed (the receivers must be receiving).
  void flush();

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

// Learners' collectives over an MPI communicator of learners only, in buckets of
// `bucket_bytes` (common/gradient_buckets.h); tensors on a GPU are staged through the
// CPU. Means are reduced to rank 0 and broadcast back, so every learner holds
// bit-identical results (an allreduce may round differently on different ranks).
class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm, int64_t bucket_bytes = int64_t{25} << 20);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_mean(std::vector<at::Tensor>& tensors) override;
  void broadcast(std::vector<at::Tensor>& tensors, int root) override;
  double all_reduce_sum(double value) override;
  // MPI_Ireduce to learner 0 now; the broadcast of the sum back in wait().
  std::unique_ptr<PendingReduction> start_all_reduce_mean(at::Tensor flat) override;

 private:
  MPI_Comm comm_;
  int64_t bucket_bytes_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace kvrl
