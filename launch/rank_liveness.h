// kvrl's heartbeats for one rank of `kvrl train`: learners watch every rank, actors watch
// the learners, and a rank that hears nothing from a peer it watches for
// run.peer_timeout_s ends the job, naming the peer (docs/multinode.md, "Network faults").
#pragma once

#include <memory>

namespace kvrl {

class HeartbeatMonitor;
class Logger;
struct RankPlan;
struct TrainConfig;

// A collective over MPI_COMM_WORLD: every rank calls it with the same config. Returns null
// when run.peer_timeout_s is 0 or the job has a single rank. The monitor runs until it is
// destroyed; destroy it only after every rank is past its loop (a barrier), or peers that
// still run would report this rank as lost.
std::unique_ptr<HeartbeatMonitor> watch_peers(const TrainConfig& config, const RankPlan& plan,
                                              const std::shared_ptr<Logger>& logger);

}  // namespace kvrl
