// Tasks that a policy solves only with its history:
// - RepeatPrevious: POPGym's game: a shuffled deck is dealt one card per step and the
//   agent must name the suit of the card dealt k cards back (k = 1 is the card just seen).
// - CueRecallTMaze: a cue (left or right) is shown on the first step only; the agent walks
//   a corridor of `corridor_length` steps and must turn to the cued side at the junction.
#pragma once

#include <vector>

#include "actor/environment.h"

namespace kvrl {

class RepeatPrevious : public Environment {
 public:
  // Throws InvalidArgumentError unless 1 <= k < 52 * num_decks.
  RepeatPrevious(int64_t num_decks, int64_t k);
  std::string name() const override { return "RepeatPrevious"; }
  const Space& observation_space() const override { return observation_space_; }
  const Space& action_space() const override { return action_space_; }
  int64_t time_limit() const override { return num_cards() - 1; }
  // state: the suit (0..3) of every card in dealing order, 52 * num_decks values.
  void set_state(std::span<const double> state, std::span<float> observation) override;

 protected:
  void reset_dynamics(uint64_t seed, std::span<float> observation) override;
  StepResult step_dynamics(std::span<const float> action, std::span<float> observation) override;

 private:
  int64_t num_cards() const { return 52 * num_decks_; }
  void deal(std::span<float> observation);  // one more card; observes its suit one-hot

  int64_t num_decks_;
  int64_t k_;
  std::vector<int> suits_;  // in dealing order
  int64_t dealt_ = 0;
  Space observation_space_;
  Space action_space_;
};

class CueRecallTMaze : public Environment {
 public:
  // Throws InvalidArgumentError unless corridor_length >= 1.
  explicit CueRecallTMaze(int64_t corridor_length);
  std::string name() const override { return "CueRecallTMaze"; }
  const Space& observation_space() const override { return observation_space_; }
  const Space& action_space() const override { return action_space_; }
  int64_t time_limit() const override { return corridor_length_ + 1; }
  // state: {cue} with 0 = left, 1 = right; the walk restarts at the corridor's start.
  void set_state(std::span<const double> state, std::span<float> observation) override;

 protected:
  void reset_dynamics(uint64_t seed, std::span<float> observation) override;
  StepResult step_dynamics(std::span<const float> action, std::span<float> observation) override;

 private:
  // [cue (+1 left, -1 right, shown at the start only), at junction (0/1), progress (0..1)]
  void observe(std::span<float> observation) const;

  int64_t corridor_length_;
  int cue_ = 0;
  int64_t position_ = 0;
  Space observation_space_;
  Space action_space_;
};

}  // namespace kvrl
