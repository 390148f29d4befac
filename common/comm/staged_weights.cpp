#include "common/comm/staged_weights.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include <cstring>
#include <thread>

#include "common/comm/parameter_vector.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

constexpr int64_t kVersionWords = 2;  // an int64 in two float32 words

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

MalformedMessageError malformed(const std::string& what) {
  return MalformedMessageError(MalformedMessageError::Reason::kContent, "weights announcement: " + what);
}

}  // namespace

at::Tensor weights_with_version(const std::vector<at::Tensor>& parameters, int64_t policy_version) {
  if (parameters.empty()) throw InvalidArgumentError("weights_with_version: no parameters");
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> pieces;
  pieces.reserve(parameters.size() + 1);
  for (const auto& p : parameters) pieces.push_back(p.detach().reshape(-1).to(at::kFloat));
  float words[kVersionWords];
  std::memcpy(words, &policy_version, sizeof(words));
  pieces.push_back(at::from_blob(words, {kVersionWords}, at::kFloat).to(parameters.front().device()));
  return at::cat(pieces);
}

int64_t version_of_weights(const at::Tensor& flat) {
  if (flat.dim() != 1 || flat.scalar_type() != at::kFloat || flat.numel() < kVersionWords) {
    throw InvalidArgumentError("version_of_weights: expected a 1-d float vector with a version, got " +
                               c10::str(flat.scalar_type(), flat.sizes()));
  }
  const at::Tensor words =
      flat.narrow(0, flat.numel() - kVersionWords, kVersionWords).to(at::kCPU).contiguous();
  int64_t version = 0;
  std::memcpy(&version, words.data_ptr<float>(), sizeof(version));
  return version;
}

StagedWeightSender::StagedWeightSender(WeightBroadcastTransport& transport, double timeout_s)
    : transport_(transport), timeout_s_(timeout_s) {}

void StagedWeightSender::release_landed() {
  while (!pending_.empty() && pending_.front().broadcast->landed()) pending_.pop_front();
  if (!pending_.empty() && seconds_since(pending_.front().started) > timeout_s_) {
    const int64_t version = pending_.front().version;
    for (Send& send : pending_) send.broadcast->abandon();
    pending_.clear();
    throw Error(transport_.name() + " weight broadcast of policy version " + std::to_string(version) +
                " from learner rank 0 had not reached every actor after " + std::to_string(timeout_s_) +
                " s (learner.nccl_timeout_s); an actor stopped joining broadcasts");
  }
}

void StagedWeightSender::start(const std::vector<at::Tensor>& parameters, int64_t policy_version) {
  release_landed();
  at::Tensor buffer = weights_with_version(parameters, policy_version);
  auto broadcast = transport_.join(buffer);
  pending_.push_back(
      {policy_version, std::move(buffer), std::move(broadcast), std::chrono::steady_clock::now()});
}

void StagedWeightSender::finish() {
  while (true) {
    release_landed();
    if (pending_.empty()) return;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

StagedWeightReceiver::StagedWeightReceiver(WeightBroadcastTransport& transport, int64_t parameter_count,
                                           at::TensorOptions staging, double timeout_s)
    : transport_(transport),
      parameter_count_(parameter_count),
      timeout_s_(timeout_s),
      staging_(at::empty({parameter_count + kVersionWords}, staging.dtype(at::kFloat))) {}

void StagedWeightReceiver::announce(const WeightAnnouncement& announcement) {
  if (announcement.parameter_count != parameter_count_) {
    throw malformed("policy version " + std::to_string(announcement.policy_version) + " has " +
                    std::to_string(announcement.parameter_count) + " parameters, this model " +
                    std::to_string(parameter_count_));
  }
  if (announcement.policy_version <= last_announced_) {
    throw malformed("policy version " + std::to_string(announcement.policy_version) +
                    " announced after version " + std::to_string(last_announced_));
  }
  last_announced_ = announcement.policy_version;
  announced_.push_back(announcement.policy_version);
}

std::optional<int64_t> StagedWeightReceiver::poll(std::vector<at::Tensor>& parameters,
                                                  int64_t current_version) {
  if (!in_flight_) {
    if (announced_.empty()) return std::nullopt;
    in_flight_version_ = announced_.front();
    announced_.pop_front();
    in_flight_ = transport_.join(staging_);
    in_flight_since_ = std::chrono::steady_clock::now();
  }
  if (!in_flight_->landed()) {
    if (seconds_since(in_flight_since_) > timeout_s_) {
      in_flight_->abandon();
      in_flight_.reset();
      throw Error(transport_.name() + " weight broadcast of policy version " +
                  std::to_string(in_flight_version_) + " had not landed after " + std::to_string(timeout_s_) +
                  " s (learner.nccl_timeout_s)");
    }
    return std::nullopt;
  }
  in_flight_.reset();
  const int64_t landed = version_of_weights(staging_);
  if (landed != in_flight_version_) {
    throw Error(transport_.name() + " weight broadcast announced as policy version " +
                std::to_string(in_flight_version_) + " carried version " + std::to_string(landed) +
                "; the actors and learner 0 disagree on the order of broadcasts");
  }
  if (landed <= current_version) return std::nullopt;
  assign_parameters(staging_, parameters);
  return landed;
}

}  // namespace kvrl
