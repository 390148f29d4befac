// libFuzzer target for the config loader (launch/train_config.h). An input is the text of
// a config file, then, after a NUL, key=value overrides separated by NULs (as `kvrl train
// CONFIG.yaml key=value ...` passes them). TrainConfig::parse may only return a config or
// throw InvalidArgumentError, which kvrl reports as a refused input (exit 2). A config it
// returns must also survive what a resumed run does with it: its effective config
// (to_yaml, saved as RUN_DIR/config.yaml and in every checkpoint) must parse back to the
// same config. Anything else (a crash, a hang, a sanitizer report, another exception, a
// config that does not come back the same) is a finding.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/support/errors.h"
#include "launch/train_config.h"

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "train_config_fuzz: %s\n", what.c_str());
  __builtin_trap();
}

void check_round_trip(const kvrl::TrainConfig& config) {
  const std::string yaml = config.to_yaml();
  kvrl::TrainConfig again;
  try {
    again = kvrl::TrainConfig::parse(yaml, {});
  } catch (const kvrl::InvalidArgumentError& error) {
    finding(std::string("the effective config does not parse back: ") + error.what() + "\n" + yaml);
  }
  if (again.to_yaml() != yaml)
    finding("the effective config parses back to another:\n" + yaml + "---\n" + again.to_yaml());
  const std::string difference = again.model_difference(config);
  if (!difference.empty()) finding("a resume would refuse the run's own checkpoint: " + difference);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t end_of_text = input.find('\0');
  const std::string text = input.substr(0, end_of_text);
  std::vector<std::string> overrides;
  for (size_t start = end_of_text; start < input.size();) {
    const size_t end = input.find('\0', start + 1);
    overrides.push_back(
        input.substr(start + 1, end == std::string::npos ? std::string::npos : end - start - 1));
    start = end;
  }
  kvrl::TrainConfig config;
  try {
    config = kvrl::TrainConfig::parse(text, overrides);
  } catch (const kvrl::InvalidArgumentError&) {
    return 0;  // the expected way to refuse
  }
  check_round_trip(config);
  return 0;
}
