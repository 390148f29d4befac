#include "learner/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/ivalue.h>
#include <ATen/ops/tensor.h>
#include <fcntl.h>
#include <torch/optim/adam.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <regex>

#include "common/io/state_dict_io.h"
#include "common/io/torch_file.h"
#include "common/support/errors.h"
#include "common/support/logger.h"
#include "common/wire/crc32.h"
#include "learner/learner.h"

namespace kvrl {
namespace {

namespace fs = std::filesystem;
using Dict = c10::impl::GenericDict;

constexpr const char* kFormat = "kvrl-checkpoint";

Dict new_dict() { return Dict(c10::StringType::get(), c10::AnyType::get()); }

// CRC-32 over a value, independent of dict order: keys sorted, tensors by dtype, shape and bytes.
uint32_t content_crc(const c10::IValue& value, uint32_t crc) {
  auto add = [&](const void* data, size_t size) { crc = crc32(data, size, crc); };
  if (value.isGenericDict()) {
    std::vector<std::pair<std::string, c10::IValue>> items;
    for (const auto& item : value.toGenericDict()) {
      if (!item.key().isString()) throw MalformedInputError("a dict key is not a string");
      items.emplace_back(item.key().toStringRef(), item.value());
    }
    std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [key, item] : items) {
      add(key.data(), key.size());
      crc = content_crc(item, crc);
    }
  } else if (value.isString()) {
    add(value.toStringRef().data(), value.toStringRef().size());
  } else if (value.isInt()) {
    const int64_t v = value.toInt();
    add(&v, sizeof(v));
  } else if (value.isDouble()) {
    const double v = value.toDouble();
    add(&v, sizeof(v));
  } else if (value.isTensor()) {
    const at::Tensor tensor = value.toTensor().cpu().contiguous();
    const int8_t dtype = static_cast<int8_t>(tensor.scalar_type());
    add(&dtype, sizeof(dtype));
    for (int64_t size : tensor.sizes()) add(&size, sizeof(size));
    add(tensor.data_ptr(), tensor.nbytes());
  } else if (!value.isNone()) {
    throw MalformedInputError(std::string("unexpected value of type ") + value.tagKind());
  }
  return crc;
}

uint32_t checksum_without_itself(const Dict& root) {
  Dict rest = new_dict();
  for (const auto& item : root) {
    if (!(item.key().isString() && item.key().toStringRef() == "checksum"))
      rest.insert(item.key(), item.value());
  }
  return content_crc(rest, 0);
}

// Typed access to a read checkpoint; every failure names the file and the entry.
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}
  [[noreturn]] void fail(const std::string& problem) const {
    throw MalformedInputError("checkpoint '" + path_ + "': " + problem);
  }
  c10::IValue entry(const Dict& dict, const std::string& key, const std::string& where) const {
    auto found = dict.find(key);
    if (found == dict.end()) fail("entry '" + where + key + "' is missing");
    return found->value();
  }
  Dict dict(const Dict& parent, const std::string& key, const std::string& where = "") const {
    const c10::IValue value = entry(parent, key, where);
    if (!value.isGenericDict()) fail("entry '" + where + key + "' is not a dict");
    return value.toGenericDict();
  }
  int64_t integer(const Dict& parent, const std::string& key, const std::string& where = "") const {
    const c10::IValue value = entry(parent, key, where);
    if (!value.isInt()) fail("entry '" + where + key + "' is not an integer");
    if (value.toInt() < 0) fail("entry '" + where + key + "' is negative");
    return value.toInt();
  }
  double number(const Dict& parent, const std::string& key, const std::string& where = "") const {
    const c10::IValue value = entry(parent, key, where);
    if (!value.isDouble() && !value.isInt()) fail("entry '" + where + key + "' is not a number");
    return value.isDouble() ? value.toDouble() : static_cast<double>(value.toInt());
  }
  std::string text(const Dict& parent, const std::string& key) const {
    const c10::IValue value = entry(parent, key, "");
    if (!value.isString()) fail("entry '" + key + "' is not a string");
    return value.toStringRef();
  }
  at::Tensor tensor(const Dict& parent, const std::string& key, const std::string& where,
                    c10::ScalarType dtype, at::IntArrayRef shape) const {
    const c10::IValue value = entry(parent, key, where);
    if (!value.isTensor()) fail("entry '" + where + key + "' is not a tensor");
    at::Tensor t = value.toTensor();
    if (t.scalar_type() != dtype || t.sizes() != shape) {
      fail("entry '" + where + key + "' has dtype " + std::string(c10::toString(t.scalar_type())) +
           " and shape " + c10::str(t.sizes()) + ", expected " + c10::toString(dtype) + " " +
           c10::str(shape));
    }
    return t;
  }

 private:
  std::string path_;
};

void sync_to_disk(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) throw Error("cannot open '" + path + "' to flush it: " + std::strerror(errno));
  const int result = ::fsync(fd);
  ::close(fd);
  if (result != 0) throw Error("cannot flush '" + path + "' to disk: " + std::strerror(errno));
}

at::Tensor returns_tensor(const std::deque<double>& returns) {
  return at::tensor(std::vector<double>(returns.begin(), returns.end()), at::kDouble);
}

}  // namespace

void write_checkpoint(const std::string& path, Learner& learner, const TrainingProgress& progress,
                      const std::string& config_yaml) {
  Dict root = new_dict();
  root.insert("format", std::string(kFormat));
  root.insert("format_version", kCheckpointFormatVersion);
  root.insert("config", config_yaml);

  Dict counters = new_dict();
  counters.insert("updates", progress.updates);
  counters.insert("env_steps", progress.env_steps);
  counters.insert("policy_version", progress.policy_version);
  counters.insert("episodes_used", progress.episodes_used);
  counters.insert("skipped_updates", progress.skipped_updates);
  counters.insert("learner_updates", learner.updates());
  counters.insert("wall_seconds", progress.wall_seconds);
  Dict dropped = new_dict();
  for (const auto& [reason, count] : progress.dropped) dropped.insert(reason, count);
  counters.insert("dropped", dropped);
  counters.insert("recent_returns", returns_tensor(progress.recent_returns));
  root.insert("progress", counters);

  Dict model = new_dict();
  for (const auto& item : state_dict_of(learner.model())) model.insert(item.key(), item.value());
  root.insert("model", model);

  Dict optimizer = new_dict();
  auto& state = learner.optimizer().state();
  for (const auto& parameter : learner.model().named_parameters()) {
    auto found = state.find(parameter.value().unsafeGetTensorImpl());
    if (found == state.end()) continue;  // not stepped yet
    const auto& adam = static_cast<const torch::optim::AdamParamState&>(*found->second);
    Dict moments = new_dict();
    moments.insert("step", adam.step());
    moments.insert("exp_avg", adam.exp_avg());
    moments.insert("exp_avg_sq", adam.exp_avg_sq());
    optimizer.insert(parameter.key(), moments);
  }
  root.insert("optimizer", optimizer);

  Dict rng = new_dict();
  rng.insert("torch_cpu", at::detail::getDefaultCPUGenerator().get_state());
  root.insert("rng", rng);
  root.insert("checksum", static_cast<int64_t>(content_crc(root, 0)));

  const std::string temporary = path + ".tmp";
  write_torch_file(temporary, root);
  sync_to_disk(temporary, O_RDONLY);
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error) throw Error("cannot move checkpoint '" + temporary + "' to '" + path + "': " + error.message());
  sync_to_disk(fs::path(path).parent_path().string(), O_RDONLY | O_DIRECTORY);
}

namespace {

// Reads `path` and checks it as a whole: a kvrl checkpoint of this format version whose
// checksum matches.
Dict read_verified(const Reader& read, const std::string& path) {
  c10::IValue value;
  try {
    value = read_torch_file(path);
  } catch (const Error& error) {
    read.fail(std::string("unreadable: ") + error.what());
  } catch (const c10::Error& error) {
    read.fail(std::string("unreadable: ") + error.what_without_backtrace());
  }
  if (!value.isGenericDict()) read.fail("not a dict");
  const Dict root = value.toGenericDict();
  auto format = root.find("format");
  if (format == root.end() || !format->value().isString() || format->value().toStringRef() != kFormat) {
    read.fail("not a kvrl checkpoint (no format entry '" + std::string(kFormat) + "')");
  }
  const int64_t version = read.integer(root, "format_version");
  if (version != kCheckpointFormatVersion) {
    read.fail("format version " + std::to_string(version) + " is not supported (this kvrl reads version " +
              std::to_string(kCheckpointFormatVersion) + ")");
  }
  const int64_t stored_crc = read.integer(root, "checksum");
  uint32_t actual_crc = 0;
  try {
    actual_crc = checksum_without_itself(root);
  } catch (const MalformedInputError& error) {
    read.fail(error.what());
  }
  if (static_cast<int64_t>(actual_crc) != stored_crc) read.fail("checksum mismatch: the file is corrupt");
  return root;
}

void load_model(const Reader& read, const Dict& root, torch::nn::Module& model) {
  try {
    load_state_dict(model, read.dict(root, "model"));  // checks every name and shape first
  } catch (const InvalidArgumentError& error) {
    read.fail(std::string("model: ") + error.what());
  }
}

}  // namespace

std::string read_checkpoint_config(const std::string& path) {
  const Reader read(path);
  return read.text(read_verified(read, path), "config");
}

void load_checkpoint_model(const std::string& path, torch::nn::Module& model) {
  const Reader read(path);
  load_model(read, read_verified(read, path), model);
}

namespace {

// The run's counters; `learner_updates` gets the learner's own update count.
TrainingProgress read_progress(const Reader& read, const Dict& root, int64_t& learner_updates) {
  const Dict counters = read.dict(root, "progress");
  TrainingProgress progress;
  progress.updates = read.integer(counters, "updates", "progress.");
  progress.env_steps = read.integer(counters, "env_steps", "progress.");
  progress.policy_version = read.integer(counters, "policy_version", "progress.");
  progress.episodes_used = read.integer(counters, "episodes_used", "progress.");
  progress.skipped_updates = read.integer(counters, "skipped_updates", "progress.");
  learner_updates = read.integer(counters, "learner_updates", "progress.");
  progress.wall_seconds = read.number(counters, "wall_seconds", "progress.");
  for (const auto& item : read.dict(counters, "dropped", "progress.")) {
    if (!item.value().isInt())
      read.fail("entry 'progress.dropped." + item.key().toStringRef() + "' is not an integer");
    progress.dropped[item.key().toStringRef()] = item.value().toInt();
  }
  const c10::IValue returns = read.entry(counters, "recent_returns", "progress.");
  if (!returns.isTensor() || returns.toTensor().scalar_type() != at::kDouble ||
      returns.toTensor().dim() != 1) {
    read.fail("entry 'progress.recent_returns' is not a 1-d float64 tensor");
  }
  const at::Tensor returns_values = returns.toTensor().contiguous();
  progress.recent_returns.assign(returns_values.data_ptr<double>(),
                                 returns_values.data_ptr<double>() + returns_values.numel());
  return progress;
}

struct AdamMoments {
  at::Tensor parameter;
  int64_t step;
  at::Tensor exp_avg, exp_avg_sq;
};

// Adam's state per parameter, checked against this learner's parameters.
std::vector<AdamMoments> read_moments(const Reader& read, const Dict& root, Learner& learner) {
  const Dict optimizer = read.dict(root, "optimizer");
  std::map<std::string, at::Tensor> parameters;
  for (const auto& parameter : learner.model().named_parameters())
    parameters[parameter.key()] = parameter.value();
  std::vector<AdamMoments> moments;
  for (const auto& item : optimizer) {
    const std::string name = item.key().toStringRef();
    auto parameter = parameters.find(name);
    if (parameter == parameters.end()) read.fail("optimizer state for unknown parameter '" + name + "'");
    if (!item.value().isGenericDict()) read.fail("entry 'optimizer." + name + "' is not a dict");
    const Dict entry = item.value().toGenericDict();
    const std::string where = "optimizer." + name + ".";
    const auto dtype = parameter->second.scalar_type();
    const auto shape = parameter->second.sizes();
    moments.push_back({parameter->second, read.integer(entry, "step", where),
                       read.tensor(entry, "exp_avg", where, dtype, shape),
                       read.tensor(entry, "exp_avg_sq", where, dtype, shape)});
  }
  return moments;
}

void restore_moments(const std::vector<AdamMoments>& moments, Learner& learner) {
  auto& state = learner.optimizer().state();
  state.clear();
  for (const AdamMoments& m : moments) {
    auto adam = std::make_unique<torch::optim::AdamParamState>();
    adam->step(m.step);
    adam->exp_avg(m.exp_avg.to(m.parameter.device()).clone());
    adam->exp_avg_sq(m.exp_avg_sq.to(m.parameter.device()).clone());
    state[m.parameter.unsafeGetTensorImpl()] = std::move(adam);
  }
}

}  // namespace

CheckpointContents read_checkpoint(const std::string& path, Learner& learner,
                                   const std::function<void(const std::string& config_yaml)>& check_config) {
  const Reader read(path);
  const Dict root = read_verified(read, path);
  CheckpointContents contents;
  contents.config_yaml = read.text(root, "config");
  if (check_config) {
    try {
      check_config(contents.config_yaml);
    } catch (const Error& error) {
      read.fail(std::string("incompatible: ") + error.what());
    }
  }
  int64_t learner_updates = 0;
  contents.progress = read_progress(read, root, learner_updates);
  // Check the optimizer state and RNG against this learner before changing anything.
  const std::vector<AdamMoments> moments = read_moments(read, root, learner);
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  const at::Tensor expected_rng = generator.get_state();
  const at::Tensor rng = read.tensor(read.dict(root, "rng"), "torch_cpu", "rng.", expected_rng.scalar_type(),
                                     expected_rng.sizes());
  load_model(read, root, learner.model());
  restore_moments(moments, learner);
  generator.set_state(rng);
  learner.restore_update_count(learner_updates);
  return contents;
}

CheckpointDirectory::CheckpointDirectory(std::string dir, int64_t keep) : dir_(std::move(dir)), keep_(keep) {
  if (keep < 1) throw InvalidArgumentError("checkpoint.keep (" + std::to_string(keep) + ") must be >= 1");
}

std::string CheckpointDirectory::save(Learner& learner, const TrainingProgress& progress,
                                      const std::string& config_yaml) {
  fs::create_directories(dir_);
  char name[64];
  std::snprintf(name, sizeof(name), "checkpoint-%010lld.pt", static_cast<long long>(progress.updates));
  std::string path = (fs::path(dir_) / name).string();
  write_checkpoint(path, learner, progress, config_yaml);
  const std::vector<std::string> all = newest_first();
  for (size_t i = static_cast<size_t>(keep_); i < all.size(); ++i) fs::remove(all[i]);
  return path;
}

std::vector<std::string> CheckpointDirectory::newest_first() const {
  std::vector<std::string> files;
  std::error_code error;
  if (!fs::is_directory(dir_, error)) return files;
  static const std::regex pattern("checkpoint-[0-9]{10}\\.pt");
  for (const auto& item : fs::directory_iterator(dir_)) {
    if (item.is_regular_file() && std::regex_match(item.path().filename().string(), pattern)) {
      files.push_back(item.path().string());
    }
  }
  // Zero-padded update numbers: the names sort by update.
  std::sort(files.rbegin(), files.rend());
  return files;
}

std::pair<std::string, CheckpointContents> CheckpointDirectory::restore_newest(
    Learner& learner, Logger& logger,
    const std::function<void(const std::string& config_yaml)>& check_config) const {
  const std::vector<std::string> files = newest_first();
  if (files.empty()) throw MalformedInputError("no checkpoint to resume from in '" + dir_ + "'");
  std::string failures;
  for (const std::string& file : files) {
    try {
      CheckpointContents contents = read_checkpoint(file, learner, check_config);
      if (!failures.empty())
        logger.warn("resuming from an older checkpoint, '" + file + "', because:" + failures);
      return {file, std::move(contents)};
    } catch (const MalformedInputError& error) {
      logger.warn(std::string("skipping ") + error.what());
      failures += std::string("\n  ") + error.what();
    }
  }
  throw MalformedInputError("no usable checkpoint in '" + dir_ + "':" + failures);
}

}  // namespace kvrl
