// Gymnasium's classic control suite in C++: the same dynamics, rewards, termination,
// time limits and observation bounds as CartPole-v1, Pendulum-v1, Acrobot-v1 and
// MountainCar-v0 (gymnasium 1.4), computed in double precision as Gymnasium does and
// observed as float32. Reset draws come from our own RNG, so episodes match Gymnasium's
// from the same state (set_state), not from the same seed.
// StatelessCartPole is POPGym's PositionOnlyCartPole: CartPole with the velocities hidden.
#pragma once

#include <array>
#include <random>

#include "actor/environment.h"

namespace kvrl {

class CartPole : public Environment {
 public:
  CartPole();
  std::string name() const override { return "CartPole-v1"; }
  const Space& observation_space() const override { return observation_space_; }
  const Space& action_space() const override { return action_space_; }
  int64_t time_limit() const override { return 500; }
  void set_state(std::span<const double> state, std::span<float> observation) override;

 protected:
  void reset_dynamics(uint64_t seed, std::span<float> observation) override;
  StepResult step_dynamics(std::span<const float> action, std::span<float> observation) override;
  // Writes the observation of state_; StatelessCartPole shows only the positions.
  virtual void observe(std::span<float> observation) const;
  // Advances state_ by one push; returns whether the pole fell or the cart left the track.
  bool advance(int push_right);

  std::array<double, 4> state_{};  // x, x_dot, theta, theta_dot
  Space observation_space_;
  Space action_space_;
};

class StatelessCartPole : public CartPole {
 public:
  StatelessCartPole();
  std::string name() const override { return "StatelessCartPole"; }
  int64_t time_limit() const override { return 200; }

 protected:
  StepResult step_dynamics(std::span<const float> action, std::span<float> observation) override;
  void observe(std::span<float> observation) const override;
};

class Pendulum : public Environment {
 public:
  Pendulum();
  std::string name() const override { return "Pendulum-v1"; }
  const Space& observation_space() const override { return observation_space_; }
  const Space& action_space() const override { return action_space_; }
  int64_t time_limit() const override { return 200; }
  void set_state(std::span<const double> state, std::span<float> observation) override;

 protected:
  void reset_dynamics(uint64_t seed, std::span<float> observation) override;
  StepResult step_dynamics(std::span<const float> action, std::span<float> observation) override;

 private:
  void observe(std::span<float> observation) const;
  std::array<double, 2> state_{};  // theta, theta_dot
  Space observation_space_;
  Space action_space_;
};

class Acrobot : public Environment {
 public:
  Acrobot();
  std::string name() const override { return "Acrobot-v1"; }
  const Space& observation_space() const override { return observation_space_; }
  const Space& action_space() const override { return action_space_; }
  int64_t time_limit() const override { return 500; }
  void set_state(std::span<const double> state, std::span<float> observation) override;

 protected:
  void reset_dynamics(uint64_t seed, std::span<float> observation) override;
  StepResult step_dynamics(std::span<const float> action, std::span<float> observation) override;

 private:
  void observe(std::span<float> observation) const;
  std::array<double, 4> state_{};  // theta1, theta2, dtheta1, dtheta2
  Space observation_space_;
  Space action_space_;
};

class MountainCar : public Environment {
 public:
  MountainCar();
  std::string name() const override { return "MountainCar-v0"; }
  const Space& observation_space() const override { return observation_space_; }
  const Space& action_space() const override { return action_space_; }
  int64_t time_limit() const override { return 200; }
  void set_state(std::span<const double> state, std::span<float> observation) override;

 protected:
  void reset_dynamics(uint64_t seed, std::span<float> observation) override;
  StepResult step_dynamics(std::span<const float> action, std::span<float> observation) override;

 private:
  void observe(std::span<float> observation) const;
  std::array<double, 2> state_{};  // position, velocity
  Space observation_space_;
  Space action_space_;
};

}  // namespace kvrl
