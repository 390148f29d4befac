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

// What the classic-control tasks share: a physical state of N doubles, fixed spaces, a
// name and a time limit, and set_state() from a reference's state.
template <size_t N>
class PhysicalEnvironment : public Environment {
 public:
  std::string name() const override { return name_; }
  const Space& observation_space() const override { return observation_space_; }
  const Space& action_space() const override { return action_space_; }
  int64_t time_limit() const override { return time_limit_; }
  void set_state(std::span<const double> state, std::span<float> observation) override;

 protected:
  PhysicalEnvironment(std::string name, int64_t time_limit, Space observation_space, Space action_space)
      : name_(std::move(name)),
        time_limit_(time_limit),
        observation_space_(std::move(observation_space)),
        action_space_(std::move(action_space)) {}
  // Writes the observation of state_.
  virtual void observe(std::span<float> observation) const = 0;

  std::array<double, N> state_{};
  std::string name_;
  int64_t time_limit_;
  Space observation_space_;
  Space action_space_;
};

class CartPole : public PhysicalEnvironment<4> {  // x, x_dot, theta, theta_dot
 public:
  CartPole();

 protected:
  CartPole(std::string name, int64_t time_limit, Space observation_space);
  void reset_dynamics(uint64_t seed, std::span<float> observation) override;
  StepResult step_dynamics(std::span<const float> action, std::span<float> observation) override;
  void observe(std::span<float> observation) const override;
  // Advances state_ by one push; returns whether the pole fell or the cart left the track.
  bool advance(int push_right);
};

class StatelessCartPole : public CartPole {
 public:
  StatelessCartPole();

 protected:
  StepResult step_dynamics(std::span<const float> action, std::span<float> observation) override;
  void observe(std::span<float> observation) const override;
};

class Pendulum : public PhysicalEnvironment<2> {  // theta, theta_dot
 public:
  Pendulum();

 protected:
  void reset_dynamics(uint64_t seed, std::span<float> observation) override;
  StepResult step_dynamics(std::span<const float> action, std::span<float> observation) override;
  void observe(std::span<float> observation) const override;
};

class Acrobot : public PhysicalEnvironment<4> {  // theta1, theta2, dtheta1, dtheta2
 public:
  Acrobot();

 protected:
  void reset_dynamics(uint64_t seed, std::span<float> observation) override;
  StepResult step_dynamics(std::span<const float> action, std::span<float> observation) override;
  void observe(std::span<float> observation) const override;
};

class MountainCar : public PhysicalEnvironment<2> {  // position, velocity
 public:
  MountainCar();

 protected:
  void reset_dynamics(uint64_t seed, std::span<float> observation) override;
  StepResult step_dynamics(std::span<const float> action, std::span<float> observation) override;
  void observe(std::span<float> observation) const override;
};

}  // namespace kvrl
