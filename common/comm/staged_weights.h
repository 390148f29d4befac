// Weights from learner 0 to the actors by announcement and staging, for collective
// transports (NCCL between GPUs, or an MPI broadcast): learner 0 announces each policy
// version to every actor over MPI, then broadcasts the flat parameter vector, with the
// version in its last two words, on the collective. An actor joins each announced
// broadcast in order at a step boundary, into a staging buffer, and keeps stepping while
// it lands; at a later step boundary a landed broadcast whose version matches its
// announcement is copied into the parameters (the caller then calls
// mark_weight_update()). A broadcast still in flight, failed, or carrying another
// version is never copied. Every rank of the collective must join every broadcast, so
// an actor joins even versions it will not apply, and drains what was announced before
// it exits.
//
// The transport sits behind WeightBroadcastTransport, so the protocol runs, and is
// tested, on the CPU as it does between GPUs.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/comm/weight_announcement.h"

namespace kvrl {

// A broadcast this rank has joined.
class PendingBroadcast {
 public:
  virtual ~PendingBroadcast() = default;
  // Whether the data has landed on this rank. Throws Error when the transport failed.
  virtual bool landed() = 0;
  // Gives the transfer up (a timeout), so that no rank stays blocked in it.
  virtual void abandon() = 0;
};

class WeightBroadcastTransport {
 public:
  virtual ~WeightBroadcastTransport() = default;
  // Joins the next broadcast: from `buffer` on the root, into it elsewhere. The buffer
  // (1-d float) must stay alive until the broadcast has landed or been abandoned.
  virtual std::unique_ptr<PendingBroadcast> join(at::Tensor buffer) = 0;
  // For messages, e.g. "NCCL" or "MPI_Ibcast".
  virtual std::string name() const = 0;
};

// The flat float vector of `parameters` with `policy_version` in two trailing words.
at::Tensor weights_with_version(const std::vector<at::Tensor>& parameters, int64_t policy_version);
// The version in the trailing words of such a vector (one device-to-host copy).
int64_t version_of_weights(const at::Tensor& flat);

// Learner 0's side.
class StagedWeightSender {
 public:
  StagedWeightSender(WeightBroadcastTransport& transport, double timeout_s);
  // Starts broadcasting `parameters` as `policy_version`; the caller has announced it.
  // Broadcasts that landed are released; one older than the timeout throws Error.
  void start(const std::vector<at::Tensor>& parameters, int64_t policy_version);
  // Waits, up to the timeout, until every broadcast has landed (before the run ends).
  void finish();
  size_t in_flight() const { return pending_.size(); }

 private:
  struct Send {
    int64_t version;
    at::Tensor buffer;
    std::unique_ptr<PendingBroadcast> broadcast;
    std::chrono::steady_clock::time_point started;
  };
  void release_landed();

  WeightBroadcastTransport& transport_;
  double timeout_s_;
  std::deque<Send> pending_;
};

// An actor's side.
class StagedWeightReceiver {
 public:
  StagedWeightReceiver(WeightBroadcastTransport& transport, int64_t parameter_count,
                       at::TensorOptions staging, double timeout_s);
  // Queues the announced broadcast. Throws MalformedMessageError when its parameter count
  // is not this model's, or its version is not above the last one announced.
  void announce(const WeightAnnouncement& announcement);
  // At a step boundary: joins the oldest announced broadcast if none is in flight; when
  // the one in flight has landed and carries its announced version, copies it into
  // `parameters` and returns that version, unless it is not newer than `current_version`
  // (then it is only released). Throws Error when the transport fails, a broadcast stays
  // in flight past the timeout, or the landed version is not the announced one.
  std::optional<int64_t> poll(std::vector<at::Tensor>& parameters, int64_t current_version);
  // Announced broadcasts not yet landed (the one in flight included).
  size_t outstanding() const { return announced_.size() + (in_flight_ ? 1 : 0); }

 private:
  WeightBroadcastTransport& transport_;
  int64_t parameter_count_;
  double timeout_s_;
  at::Tensor staging_;
  std::deque<int64_t> announced_;
  int64_t last_announced_ = -1;
  std::unique_ptr<PendingBroadcast> in_flight_;
  int64_t in_flight_version_ = -1;
  std::chrono::steady_clock::time_point in_flight_since_;
};

}  // namespace kvrl
