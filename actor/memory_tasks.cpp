#include "actor/memory_tasks.h"

#include <algorithm>
#include <random>

#include "common/support/errors.h"

namespace kvrl {

RepeatPrevious::RepeatPrevious(int64_t num_decks, int64_t k)
    : num_decks_(num_decks),
      k_(k),
      observation_space_(Space::box({4}, {0, 0, 0, 0}, {1, 1, 1, 1})),
      action_space_(Space::discrete(4)) {
  if (num_decks < 1)
    throw InvalidArgumentError("RepeatPrevious: num_decks (" + std::to_string(num_decks) + ") must be >= 1");
  if (k < 1 || k >= num_cards()) {
    throw InvalidArgumentError("RepeatPrevious: k (" + std::to_string(k) + ") must be in [1, " +
                               std::to_string(num_cards() - 1) + "] for " + std::to_string(num_decks) +
                               " deck(s)");
  }
}

void RepeatPrevious::reset_dynamics(uint64_t seed, std::span<float> observation) {
  suits_.resize(num_cards());
  for (int64_t i = 0; i < num_cards(); ++i) suits_[i] = static_cast<int>(i % 4);
  std::mt19937_64 rng(seed);
  std::shuffle(suits_.begin(), suits_.end(), rng);
  dealt_ = 0;
  deal(observation);
}

void RepeatPrevious::set_state(std::span<const double> state, std::span<float> observation) {
  if (static_cast<int64_t>(state.size()) != num_cards()) {
    throw InvalidArgumentError("RepeatPrevious: state must hold " + std::to_string(num_cards()) +
                               " suits, got " + std::to_string(state.size()));
  }
  suits_.clear();
  for (double suit : state) {
    if (suit != 0 && suit != 1 && suit != 2 && suit != 3) {
      throw InvalidArgumentError("RepeatPrevious: a suit must be 0, 1, 2 or 3, got " + std::to_string(suit));
    }
    suits_.push_back(static_cast<int>(suit));
  }
  dealt_ = 0;
  deal(observation);
}

void RepeatPrevious::deal(std::span<float> observation) {
  std::fill(observation.begin(), observation.end(), 0.0f);
  observation[suits_[dealt_]] = 1.0f;
  ++dealt_;
}

StepResult RepeatPrevious::step_dynamics(std::span<const float> action, std::span<float> observation) {
  const double reward_scale = 1.0 / static_cast<double>(num_cards() - k_);
  StepResult result;
  result.terminated = num_cards() - dealt_ == 1;
  if (dealt_ >= k_) {
    result.reward = static_cast<int>(action[0]) == suits_[dealt_ - k_] ? reward_scale : -reward_scale;
  }
  deal(observation);
  return result;
}

CueRecallTMaze::CueRecallTMaze(int64_t corridor_length)
    : corridor_length_(corridor_length),
      observation_space_(Space::box({3}, {-1, 0, 0}, {1, 1, 1})),
      action_space_(Space::discrete(2)) {
  if (corridor_length < 1) {
    throw InvalidArgumentError("CueRecallTMaze: corridor_length (" + std::to_string(corridor_length) +
                               ") must be >= 1");
  }
}

void CueRecallTMaze::reset_dynamics(uint64_t seed, std::span<float> observation) {
  std::mt19937_64 rng(seed);
  cue_ = static_cast<int>(std::uniform_int_distribution<int>(0, 1)(rng));
  position_ = 0;
  observe(observation);
}

void CueRecallTMaze::set_state(std::span<const double> state, std::span<float> observation) {
  if (state.size() != 1 || (state[0] != 0 && state[0] != 1)) {
    throw InvalidArgumentError("CueRecallTMaze: state must be {cue} with cue 0 (left) or 1 (right)");
  }
  cue_ = static_cast<int>(state[0]);
  position_ = 0;
  observe(observation);
}

StepResult CueRecallTMaze::step_dynamics(std::span<const float> action, std::span<float> observation) {
  StepResult result;
  if (position_ == corridor_length_) {  // at the junction: the turn decides the episode
    result.reward = static_cast<int>(action[0]) == cue_ ? 1.0 : -1.0;
    result.terminated = true;
  } else {
    ++position_;  // in the corridor every action walks on
  }
  observe(observation);
  return result;
}

void CueRecallTMaze::observe(std::span<float> observation) const {
  observation[0] = position_ == 0 ? (cue_ == 0 ? 1.0f : -1.0f) : 0.0f;
  observation[1] = position_ == corridor_length_ ? 1.0f : 0.0f;
  observation[2] = static_cast<float>(position_) / static_cast<float>(corridor_length_);
}

}  // namespace kvrl
