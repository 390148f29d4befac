#include "common/comm/mpi_transport.h"

#include <climits>

#include "common/comm/mpi_check.h"

namespace kvrl {

MpiTransport::MpiTransport(MPI_Comm comm) : comm_(comm) {
  KVRL_MPI_CHECK(MPI_Comm_rank(comm_, &rank_), "reading this rank");
  KVRL_MPI_CHECK(MPI_Comm_size(comm_, &size_), "reading the world size");
}

MpiTransport::~MpiTransport() {
  try {
    flush();
  } catch (const Error&) {
    // A destructor cannot report; the run already failed if a send did.
  }
}

void MpiTransport::send(int destination, MessageTag tag, std::vector<uint8_t> bytes) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) throw InvalidArgumentError("message larger than 2 GiB");
  pending_.push_back({MPI_REQUEST_NULL, std::move(bytes)});
  PendingSend& send = pending_.back();
  KVRL_MPI_CHECK(MPI_Isend(send.bytes.data(), static_cast<int>(send.bytes.size()), MPI_BYTE, destination,
                           static_cast<int>(tag), comm_, &send.request),
                 "sending a message to rank " + std::to_string(destination));
  progress();
}

std::optional<Message> MpiTransport::poll() {
  progress();
  int arrived = 0;
  MPI_Status status;
  KVRL_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &arrived, &status), "probing for messages");
  if (!arrived) return std::nullopt;
  int count = 0;
  KVRL_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &count), "sizing an arrived message");
  Message message;
  message.source = status.MPI_SOURCE;
  message.tag = static_cast<MessageTag>(status.MPI_TAG);
  message.bytes.resize(static_cast<size_t>(count));
  KVRL_MPI_CHECK(MPI_Recv(message.bytes.data(), count, MPI_BYTE, status.MPI_SOURCE, status.MPI_TAG, comm_,
                          MPI_STATUS_IGNORE),
                 "receiving a message from rank " + std::to_string(status.MPI_SOURCE));
  return message;
}

size_t MpiTransport::progress() {
  while (!pending_.empty()) {
    int done = 0;
    KVRL_MPI_CHECK(MPI_Test(&pending_.front().request, &done, MPI_STATUS_IGNORE), "completing a send");
    if (!done) break;
    pending_.pop_front();
  }
  return pending_.size();
}

void MpiTransport::flush() {
  while (!pending_.empty()) {
    KVRL_MPI_CHECK(MPI_Wait(&pending_.front().request, MPI_STATUS_IGNORE), "waiting for a send to complete");
    pending_.pop_front();
  }
}

}  // namespace kvrl
