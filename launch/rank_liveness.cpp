#include "launch/rank_liveness.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "common/comm/heartbeat_monitor.h"
#include "common/comm/rank_directory.h"
#include "common/support/logger.h"
#include "launch/train_command.h"
#include "launch/train_config.h"
#include "launch/train_rank.h"

namespace kvrl {
namespace {

// Learners are the lowest ranks (launch/train_command.cpp plan_rank).
bool is_learner_rank(const RankPlan& plan, int rank) { return rank < static_cast<int>(plan.learners.size()); }

std::string rank_name(const RankPlan& plan, const RankDirectory& directory, int rank) {
  return cat("rank ", rank, " (", is_learner_rank(plan, rank) ? "learner" : "actor", " on ",
             directory.hosts[rank].host, ")");
}

PeerEndpoint endpoint(const RankPlan& plan, const RankDirectory& directory,
                      const std::vector<uint32_t>& ambiguous, int rank) {
  return {rank, rank_name(plan, directory, rank),
          address_to_reach(directory.hosts[plan.rank], directory.hosts[rank], ambiguous),
          directory.ports[rank]};
}

// The silence handler runs on the monitor's thread while the main thread may sit in a
// collective that will never finish: the only way out is to leave. The process exits
// without MPI_Finalize, so mpirun ends the job on every host. The last checkpoint stands
// (they are written to a temporary file and renamed).
HeartbeatMonitor::SilenceHandler end_the_job(const RankPlan& plan, const RankDirectory& directory,
                                             const std::shared_ptr<Logger>& logger, double timeout_s) {
  const std::string self = rank_name(plan, directory, plan.rank);
  const std::string resume = cat("kvrl train --resume ", plan.run_dir.string());
  return [self, resume, timeout_s, logger](const std::vector<SilentPeer>& silent) {
    const std::string lost = describe_silent_peers(silent, timeout_s);
    logger->error(cat("lost contact with ", lost, "; ending the job"));
    std::fprintf(stderr, "kvrl train: %s lost contact with %s; ending the job (exit %d); resume with: %s\n",
                 self.c_str(), lost.c_str(), kTrainPeerLost, resume.c_str());
    std::fflush(stderr);
    std::_Exit(kTrainPeerLost);
  };
}

}  // namespace

std::unique_ptr<HeartbeatMonitor> watch_peers(const TrainConfig& config, const RankPlan& plan,
                                              const std::shared_ptr<Logger>& logger) {
  if (config.peer_timeout_s == 0 || plan.size == 1) return nullptr;
  const HeartbeatOptions options{std::min(1.0, config.peer_timeout_s / 10), config.peer_timeout_s};
  auto monitor = std::make_unique<HeartbeatMonitor>(plan.rank, options);
  const RankDirectory directory = exchange_rank_directory(MPI_COMM_WORLD, monitor->port());
  const std::vector<uint32_t> ambiguous = ambiguous_addresses(directory.hosts);
  std::vector<PeerEndpoint> notify, watch;
  for (int peer = 0; peer < plan.size; ++peer) {
    if (peer == plan.rank) continue;
    // Learners depend on every rank, actors on the learners; each rank tells those that watch it.
    if (plan.is_learner || is_learner_rank(plan, peer)) {
      watch.push_back(endpoint(plan, directory, ambiguous, peer));
      notify.push_back(watch.back());
    }
  }
  monitor->start(directory.job_token, notify, watch,
                 end_the_job(plan, directory, logger, config.peer_timeout_s));
  return monitor;
}

}  // namespace kvrl
