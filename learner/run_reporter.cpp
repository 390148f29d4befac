#include "learner/run_reporter.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/support/errors.h"
#include "common/support/logger.h"
#include "common/wire/crc32.h"
#include "common/wire/episode_codec.h"
#include "common/wire/weights_codec.h"
#include "learner/checkpoint.h"
#include "learner/status_server.h"
#include "learner/tensorboard_writer.h"

namespace kvrl {
namespace {

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Invalid UTF-8 (a tag or reason in another encoding) becomes U+FFFD instead of an exception.
template <typename Json>
std::string as_text(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::ofstream open_metrics_file(const std::filesystem::path& path, bool append) {
  std::ofstream out(path, append ? std::ios::app : std::ios::trunc);
  if (!out) throw Error("cannot write metrics to '" + path.string() + "'");
  return out;
}

}  // namespace

bool progress_in_place_from_environment() {
  const char* value = std::getenv("KVRL_PROGRESS");
  const std::string mode = value ? value : "auto";
  if (mode == "inplace") return true;
  if (mode == "plain") return false;
  if (mode != "auto")
    throw InvalidArgumentError("KVRL_PROGRESS '" + mode + "' must be inplace, plain or auto");
  return isatty(STDOUT_FILENO) == 1 && std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr;
}

RunReporter::RunReporter(RunReporterOptions options, RunIdentity identity, std::shared_ptr<Logger> logger)
    : options_(std::move(options)), identity_(std::move(identity)), logger_(std::move(logger)) {
  char hash[9];
  std::snprintf(hash, sizeof(hash), "%08x",
                crc32(identity_.config_yaml.data(), identity_.config_yaml.size()));
  config_hash_ = hash;
  const std::filesystem::path dir = options_.run_dir;
  tensorboard_ = std::make_unique<TensorBoardWriter>((dir / "tensorboard").string());
  const bool csv_exists = std::filesystem::exists(dir / "metrics.csv");
  jsonl_ = open_metrics_file(dir / "metrics.jsonl", options_.continuing);
  csv_ = open_metrics_file(dir / "metrics.csv", options_.continuing);
  if (!(options_.continuing && csv_exists)) {
    csv_ << "env_steps,updates,wall_seconds,mean_return,policy_loss,value_loss,entropy,approx_kl,clip_"
            "fraction,"
            "rho_mean,packing_efficiency,queue_depth,policy_lag_mean\n";
  }
  if (options_.status_port > 0) {
    status_ = std::make_unique<StatusServer>(options_.status_address, options_.status_port, logger_);
    status_->publish(status_json(RunSnapshot{}, "starting"),
                     prometheus_text(RunSnapshot{}, identity_.algorithm));
  }
}

RunReporter::~RunReporter() = default;

int RunReporter::status_port() const { return status_ ? status_->port() : 0; }

std::vector<std::pair<std::string, double>> RunReporter::scalars(const RunSnapshot& s,
                                                                 const std::string& algorithm) {
  std::vector<std::pair<std::string, double>> out = {
      {"episode/return_mean", s.return_mean}, {"episode/length_mean", s.length_mean},
      {"loss/policy", s.update.policy_loss},  {"loss/value", s.update.value_loss},
      {"loss/entropy", s.update.entropy},
  };
  if (algorithm == "vtrace") {
    out.insert(out.end(), {{"vtrace/rho_mean", s.update.rho_mean}, {"vtrace/rho_max", s.update.rho_max}});
  } else {
    out.insert(out.end(),
               {{"ppo/approx_kl", s.update.approx_kl}, {"ppo/clip_fraction", s.update.clip_fraction}});
  }
  out.insert(out.end(),
             {
                 {"optimizer/grad_norm", s.update.grad_norm},
                 {"optimizer/learning_rate", s.update.learning_rate},
                 {"optimizer/entropy_coef", s.update.entropy_coef},
                 {"policy_lag/mean", s.lag_mean},
                 {"policy_lag/max", s.lag_max},
                 {"throughput/env_steps_per_s", s.env_steps_per_s},
                 {"throughput/updates_per_s", s.updates_per_s},
                 {"learner/packing_efficiency", s.update.packing_efficiency},
                 {"learner/queue_depth", static_cast<double>(s.queue_depth)},
                 {"learner/skipped_updates", static_cast<double>(s.skipped_updates)},
                 {"acting/kl", s.update.acting_kl},
                 {"acting/same_version_steps", static_cast<double>(s.update.same_version_steps)},
                 {"acting/same_version_max_log_prob_error", s.update.same_version_max_log_prob_error},
                 {"acting/same_version_max_value_error", s.update.same_version_max_value_error},
             });
  for (const auto& [reason, count] : s.dropped)
    out.emplace_back("dropped/" + reason, static_cast<double>(count));
  return out;
}

std::string RunReporter::prometheus_text(const RunSnapshot& s, const std::string& algorithm) {
  std::ostringstream out;
  out.precision(10);
  auto metric = [&](const std::string& name, const char* type, const std::string& help, double value) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n'
        << name << ' ' << value << '\n';
  };
  metric("kvrl_env_steps_total", "counter", "Environment steps trained on.",
         static_cast<double>(s.env_steps));
  metric("kvrl_updates_total", "counter", "Learner updates.", static_cast<double>(s.updates));
  metric("kvrl_episodes_used_total", "counter", "Episodes trained on.", static_cast<double>(s.episodes_used));
  metric("kvrl_skipped_updates_total", "counter", "Updates skipped for a NaN or Inf loss or gradient.",
         static_cast<double>(s.skipped_updates));
  metric("kvrl_policy_version", "gauge", "Version of the weights learner 0 holds.",
         static_cast<double>(s.policy_version));
  out << "# HELP kvrl_dropped_episodes_total Episodes dropped, by reason.\n# TYPE "
         "kvrl_dropped_episodes_total counter\n";
  for (const auto& [reason, count] : s.dropped)
    out << "kvrl_dropped_episodes_total{reason=\"" << reason << "\"} " << count << '\n';
  for (const auto& [tag, value] : scalars(s, algorithm)) {
    if (tag.rfind("dropped/", 0) == 0 || tag == "learner/skipped_updates") continue;  // counters above
    std::string name = "kvrl_" + tag;
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    out << "# TYPE " << name << " gauge\n" << name << ' ' << (std::isfinite(value) ? value : 0.0) << '\n';
  }
  return out.str();
}

// nlohmann::json writes NaN and Inf (a skipped update's losses) as null, as JSON must.
std::string RunReporter::status_json(const RunSnapshot& s, const std::string& state) const {
  const nlohmann::json status = {
      {"state", state},
      {"config_hash", config_hash_},
      {"algorithm", identity_.algorithm},
      {"ranks",
       {{"world_size", identity_.world_size},
        {"learners", identity_.learners},
        {"actors", identity_.actors}}},
      {"versions",
       {{"policy", s.policy_version},
        {"checkpoint_format", kCheckpointFormatVersion},
        {"episode_wire_format", EpisodeCodec::kVersion},
        {"weights_wire_format", WeightsCodec::kVersion}}},
      {"counters",
       {{"updates", s.updates},
        {"env_steps", s.env_steps},
        {"episodes_used", s.episodes_used},
        {"skipped_updates", s.skipped_updates},
        {"dropped", s.dropped}}},
      {"return_mean", s.return_mean},
      {"policy_lag_mean", s.lag_mean},
      {"queue_depth", s.queue_depth},
      {"env_steps_per_s", s.env_steps_per_s},
      {"wall_seconds", s.wall_seconds},
  };
  return as_text(status);
}

void RunReporter::record_update(const RunSnapshot& s) {
  const double now = unix_time();
  const auto values = scalars(s, identity_.algorithm);
  tensorboard_->write_scalars(s.env_steps, now, values);
  // Ordered as written: the counters first, then the scalars in their TensorBoard order.
  nlohmann::ordered_json row = {
      {"update", s.updates}, {"env_steps", s.env_steps}, {"wall_seconds", s.wall_seconds}, {"time", now}};
  for (const auto& [tag, value] : values) row[tag] = value;
  jsonl_ << as_text(row) << '\n';
  jsonl_.flush();
  const UpdateStats& u = s.update;
  csv_ << s.env_steps << ',' << s.updates << ',' << s.wall_seconds << ',' << s.return_mean << ','
       << u.policy_loss << ',' << u.value_loss << ',' << u.entropy << ',' << u.approx_kl << ','
       << u.clip_fraction << ',' << u.rho_mean << ',' << u.packing_efficiency << ',' << s.queue_depth << ','
       << s.lag_mean << '\n';
  csv_.flush();
  if (!jsonl_ || !csv_) throw Error("cannot write metrics to '" + options_.run_dir + "'");
  if (status_) status_->publish(status_json(s, "training"), prometheus_text(s, identity_.algorithm));
}

void RunReporter::show_progress(const RunSnapshot& s) {
  char line[256];
  std::snprintf(line, sizeof(line),
                "env steps %lld (%.0f/s) | updates %lld (%.2f/s) | return %.1f | lag %.1f/%.0f | queue %lld",
                static_cast<long long>(s.env_steps), s.env_steps_per_s, static_cast<long long>(s.updates),
                s.updates_per_s, s.return_mean, s.lag_mean, s.lag_max, static_cast<long long>(s.queue_depth));
  logger_->info_to_file(std::string("progress: ") + line);
  if (options_.progress_in_place) {
    std::printf("\r\033[K%s", line);  // rewrite the line in place
    line_open_ = true;
  } else {
    std::printf("progress: %s\n", line);
  }
  std::fflush(stdout);
}

void RunReporter::finish(const RunSnapshot& s, const std::string& state) {
  if (line_open_) std::printf("\n");
  std::fflush(stdout);
  line_open_ = false;
  if (status_) status_->publish(status_json(s, state), prometheus_text(s, identity_.algorithm));
}

}  // namespace kvrl
