// The seam between the loops and the network: point-to-point messages between ranks
// (episodes, credit, weights and their announcements, stop and done), never blocking the
// caller but in flush(). ActorLoop and LearnerLoop take a Transport; the learners'
// collectives are behind Communicator (common/comm/communicator.h) and the staged weight
// broadcast behind WeightBroadcastTransport (common/comm/staged_weights.h).
// Implementations: MpiTransport (ranks of an MPI communicator) and InProcessTransport
// (ranks as threads of one process, for tests without mpiexec). Both carry the same
// encoded bytes, so a codec bug shows either way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace kvrl {

enum class MessageTag : int {
  kEpisode = 1,          // actor -> learner: an encoded Episode
  kCredit = 2,           // learner -> actor: one more episode may be sent
  kWeights = 3,          // learner 0 -> actor: encoded weights with their policy version
  kStop = 4,             // learner -> actor: this learner sends nothing more; stop acting (one byte: RunEnd)
  kActorDone = 5,        // actor -> learner: int64 count of episodes this actor sent to it
  kStopRequest = 6,      // actor -> learner: this actor was asked to stop (a signal); stop the run
  kWeightsAnnounce = 7,  // learner 0 -> actor: a staged weight broadcast of this version follows (16 bytes)
  // Events on learner 0, from its RemoteActorServer (common/comm/remote_actor_server.h),
  // never sent between ranks: a remote actor joined (source = its id), or left (bytes:
  // the reason, as text).
  kActorJoined = 8,
  kActorLeft = 9,
};

// Why a run ended, carried by kStop so that every rank exits with the same status.
enum class RunEnd : uint8_t { kFinished = 0, kInterrupted = 1, kNonFinite = 2 };

struct Message {
  int source = -1;
  MessageTag tag = MessageTag::kEpisode;
  std::vector<uint8_t> bytes;
};

// One rank's end of the network. Messages from one sender to one receiver arrive in the
// order sent. One thread per rank calls it.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Starts sending; never blocks. Throws kvrl::Error (MpiError for MPI).
  virtual void send(int destination, MessageTag tag, std::vector<uint8_t> bytes) = 0;
  // The next arrived message from any rank, or nothing; never blocks.
  virtual std::optional<Message> poll() = 0;
  // Moves sends along; returns how many are still in flight.
  virtual size_t progress() = 0;
  // Blocks until every send has completed (the receivers must be receiving).
  virtual void flush() = 0;
};

}  // namespace kvrl
