#include "launch/actor_command.h"

#include <ATen/Parallel.h>

#include <cstdio>

#include "actor/actor_loop.h"
#include "common/comm/accelerator_probe.h"
#include "common/comm/device_placement.h"
#include "common/comm/tcp_actor_transport.h"
#include "common/support/errors.h"
#include "common/support/logger.h"
#include "common/support/number_text.h"
#include "common/support/process_signals.h"
#include "launch/command_line.h"
#include "launch/run_setup.h"
#include "launch/train_command.h"
#include "launch/train_rank.h"

namespace kvrl {
namespace {

struct ActorInputs {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string host;
  int port = 0;
  double connect_timeout_s = 30;
};

ActorInputs actor_inputs(const RemoteActorArguments& arguments) {
  if (arguments.positional.empty() || arguments.positional.front().find('=') != std::string::npos) {
    throw InvalidArgumentError(
        "actor needs the training's config file: kvrl actor CONFIG.yaml --connect HOST:PORT --token-file "
        "FILE "
        "[key=value ...]");
  }
  ActorInputs inputs;
  inputs.config_path = arguments.positional.front();
  inputs.overrides.assign(arguments.positional.begin() + 1, arguments.positional.end());
  std::tie(inputs.host, inputs.port) = parse_host_port(arguments.connect);
  const std::optional<double> timeout = parse_number(arguments.connect_timeout_s);
  if (!timeout || *timeout < 0.1 || *timeout > 3600) {
    throw InvalidArgumentError("--connect-timeout '" + arguments.connect_timeout_s +
                               "': expected seconds in [0.1, 3600]");
  }
  inputs.connect_timeout_s = *timeout;
  return inputs;
}

c10::Device actor_device(const TrainConfig& config, Logger& logger) {
  const AcceleratorReport accelerators = probe_accelerators();
  const DeviceChoice device = choose_device(DeviceRequest::parse(config.actor_device),
                                            local_rank_from_environment(), accelerators.cuda_devices);
  (device.fell_back ? logger.warn(device.reason) : logger.info(device.reason));
  return device.device;
}

int exit_code_of(const ActorStats& stats, const TcpActorTransport& transport, Logger& logger) {
  if (!transport.lost().empty() && !transport.stopped_by_learner()) {
    logger.warn(transport.lost());
    std::printf("kvrl actor: disconnected (%s): env_steps=%lld episodes_sent=%lld\n",
                transport.lost().c_str(), static_cast<long long>(stats.env_steps),
                static_cast<long long>(stats.episodes_sent));
    return kRemoteActorDisconnected;
  }
  std::printf("kvrl actor: %s: env_steps=%lld episodes_sent=%lld policy_version=%lld\n",
              stats.asked_to_stop ? "stopped" : "finished", static_cast<long long>(stats.env_steps),
              static_cast<long long>(stats.episodes_sent), static_cast<long long>(stats.policy_version));
  return stats.asked_to_stop || stats.end == RunEnd::kInterrupted ? kTrainInterrupted : kTrainFinished;
}

}  // namespace

int run_remote_actor(const RemoteActorArguments& arguments) {
  const ActorInputs inputs = actor_inputs(arguments);
  TrainingSetup setup = prepare_training(inputs.config_path, inputs.overrides);
  const TcpHello hello{kTcpFrameVersion, setup.config.actor_identity_hash(),
                       read_token_file(arguments.token_file)};
  install_stop_request_handlers();
  TcpActorTransport transport(inputs.host, inputs.port, hello,
                              std::chrono::duration<double>(inputs.connect_timeout_s),
                              remote_frame_limit(setup.spec, ActorCritic(setup.model).parameters()));
  auto logger =
      std::make_shared<Logger>(transport.rank(), "remote actor", arguments.log_path, setup.config.log_level);
  logger->info(cat("joined learner 0 at ", inputs.host, ":", inputs.port, " as actor ", transport.rank()));
  const c10::Device device = actor_device(setup.config, *logger);
  at::set_num_threads(static_cast<int>(setup.config.actor_threads));
  const uint64_t seed =
      static_cast<uint64_t>(setup.config.seed) * 1000003 + static_cast<uint64_t>(transport.rank());
  const std::unique_ptr<VectorEnv> env =
      make_configured_vector_env(setup.config, setup.config.num_envs, seed * 7919);
  ActorLoop loop(actor_loop_options(setup.config, {0}, device, seed), transport,
                 make_policy(setup, /*learner=*/false, device, logger), *env, EpisodeCodec(setup.spec),
                 logger);
  const ActorStats stats = loop.run();
  return exit_code_of(stats, transport, *logger);
}

}  // namespace kvrl
