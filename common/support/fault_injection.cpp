#include "common/support/fault_injection.h"

#include <csignal>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "common/support/errors.h"
#include "common/support/logger.h"
#include "common/support/number_text.h"

namespace kvrl {
namespace {

constexpr const char* kForms =
    "expected comma-separated KIND:RANK:N[:COUNT] with KIND one of corrupt_episode, exit, abort, kill, "
    "freeze, nan_loss, RANK >= 0, N >= 1 and COUNT >= 1 (nan_loss only)";

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, separator)) parts.push_back(part);
  return parts;
}

int64_t parse_count(const std::string& text, int64_t minimum, const std::string& entry) {
  const std::optional<int64_t> value = parse_integer(text);
  if (!value || *value < minimum) {
    throw InvalidArgumentError("KVRL_FAULT entry '" + entry + "': '" + text +
                               "' is not an integer >= " + std::to_string(minimum) + "; " + kForms);
  }
  return *value;
}

}  // namespace

FaultPlan FaultPlan::parse(const std::string& spec, int rank) {
  FaultPlan plan;
  for (const std::string& entry : split(spec, ',')) {
    if (entry.empty()) continue;
    const std::vector<std::string> fields = split(entry, ':');
    const std::string& kind = fields[0];
    const bool counted = kind == "nan_loss";
    if (fields.size() < 3 || fields.size() > (counted ? 4u : 3u)) {
      throw InvalidArgumentError("KVRL_FAULT entry '" + entry + "': " + kForms);
    }
    const int64_t fault_rank = parse_count(fields[1], 0, entry);
    const int64_t step = parse_count(fields[2], 1, entry);
    const int64_t count = fields.size() == 4 ? parse_count(fields[3], 1, entry) : 1;
    int64_t* target = kind == "corrupt_episode" ? &plan.corrupt_episode
                      : kind == "exit"          ? &plan.exit_at
                      : kind == "abort"         ? &plan.abort_at
                      : kind == "kill"          ? &plan.kill_at
                      : kind == "freeze"        ? &plan.freeze_at
                      : kind == "nan_loss"      ? &plan.nan_loss_from
                                                : nullptr;
    if (!target)
      throw InvalidArgumentError("KVRL_FAULT entry '" + entry + "': unknown kind '" + kind + "'; " + kForms);
    if (fault_rank != rank) continue;
    *target = step;
    if (counted) plan.nan_loss_count = count;
  }
  return plan;
}

FaultPlan FaultPlan::from_environment(int rank) {
  const char* spec = std::getenv("KVRL_FAULT");
  return spec ? parse(spec, rank) : FaultPlan{};
}

void FaultPlan::fail_if_due(int64_t step, Logger& logger) const {
  if (step == exit_at) {
    logger.error(cat("fault injection: exiting with status 1 at step ", step));
    std::_Exit(1);
  }
  if (step == abort_at) {
    logger.error(cat("fault injection: aborting at step ", step));
    std::abort();
  }
  if (step == kill_at) {
    logger.error(cat("fault injection: SIGKILL to myself at step ", step));
    std::raise(SIGKILL);
  }
  if (step == freeze_at) {
    logger.error(cat("fault injection: SIGSTOP to myself at step ", step));
    std::raise(SIGSTOP);
  }
}

}  // namespace kvrl
