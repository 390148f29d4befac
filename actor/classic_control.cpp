#include "actor/classic_control.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "common/support/errors.h"

namespace kvrl {
namespace {

constexpr double kPi = std::numbers::pi;
constexpr float kInf = std::numeric_limits<float>::infinity();

// CartPole constants (Gymnasium's CartPoleEnv).
constexpr double kGravity = 9.8;
constexpr double kMassCart = 1.0;
constexpr double kMassPole = 0.1;
constexpr double kTotalMass = kMassCart + kMassPole;
constexpr double kHalfPoleLength = 0.5;
constexpr double kPoleMassLength = kMassPole * kHalfPoleLength;
constexpr double kForceMag = 10.0;
constexpr double kTau = 0.02;
constexpr double kThetaThreshold = 12 * 2 * kPi / 360;
constexpr double kXThreshold = 2.4;

double uniform(std::mt19937_64& rng, double low, double high) {
  return std::uniform_real_distribution<double>(low, high)(rng);
}

}  // namespace

template <size_t N>
void PhysicalEnvironment<N>::set_state(std::span<const double> state, std::span<float> observation) {
  if (state.size() != N) {
    throw InvalidArgumentError(name() + ": state has " + std::to_string(state.size()) + " values, expected " +
                               std::to_string(N));
  }
  std::copy(state.begin(), state.end(), state_.begin());
  observe(observation);
}

template class PhysicalEnvironment<2>;
template class PhysicalEnvironment<4>;

CartPole::CartPole()
    : CartPole("CartPole-v1", 500,
               Space::box({4}, {-2 * kXThreshold, -kInf, static_cast<float>(-2 * kThetaThreshold), -kInf},
                          {2 * kXThreshold, kInf, static_cast<float>(2 * kThetaThreshold), kInf})) {}

CartPole::CartPole(std::string name, int64_t time_limit, Space observation_space)
    : PhysicalEnvironment(std::move(name), time_limit, std::move(observation_space), Space::discrete(2)) {}

void CartPole::reset_dynamics(uint64_t seed, std::span<float> observation) {
  std::mt19937_64 rng(seed);
  for (double& value : state_) value = uniform(rng, -0.05, 0.05);
  observe(observation);
}

bool CartPole::advance(int push_right) {
  auto& [x, x_dot, theta, theta_dot] = state_;
  const double force = push_right ? kForceMag : -kForceMag;
  const double cos_theta = std::cos(theta);
  const double sin_theta = std::sin(theta);
  const double temp = (force + kPoleMassLength * theta_dot * theta_dot * sin_theta) / kTotalMass;
  const double theta_acc = (kGravity * sin_theta - cos_theta * temp) /
                           (kHalfPoleLength * (4.0 / 3.0 - kMassPole * cos_theta * cos_theta / kTotalMass));
  const double x_acc = temp - kPoleMassLength * theta_acc * cos_theta / kTotalMass;
  // Explicit Euler, Gymnasium's default integrator: positions move with the old velocities.
  x = x + kTau * x_dot;
  x_dot = x_dot + kTau * x_acc;
  theta = theta + kTau * theta_dot;
  theta_dot = theta_dot + kTau * theta_acc;
  return x < -kXThreshold || x > kXThreshold || theta < -kThetaThreshold || theta > kThetaThreshold;
}

StepResult CartPole::step_dynamics(std::span<const float> action, std::span<float> observation) {
  const bool terminated = advance(static_cast<int>(action[0]));
  observe(observation);
  return {1.0, terminated, false};
}

void CartPole::observe(std::span<float> observation) const {
  for (size_t i = 0; i < 4; ++i) observation[i] = static_cast<float>(state_[i]);
}

StatelessCartPole::StatelessCartPole()
    : CartPole("StatelessCartPole", 200,
               Space::box({2}, {-2 * kXThreshold, static_cast<float>(-2 * kThetaThreshold)},
                          {2 * kXThreshold, static_cast<float>(2 * kThetaThreshold)})) {}

StepResult StatelessCartPole::step_dynamics(std::span<const float> action, std::span<float> observation) {
  StepResult result = CartPole::step_dynamics(action, observation);
  // POPGym scales CartPole's reward of 1 per step so that a full episode returns 1.
  result.reward = 1.0 / static_cast<double>(time_limit());
  return result;
}

void StatelessCartPole::observe(std::span<float> observation) const {
  observation[0] = static_cast<float>(state_[0]);
  observation[1] = static_cast<float>(state_[2]);
}

// Pendulum-v1 ---------------------------------------------------------------------------

namespace {
constexpr double kPendulumMaxSpeed = 8.0;
constexpr double kPendulumMaxTorque = 2.0;
constexpr double kPendulumDt = 0.05;
constexpr double kPendulumG = 10.0;
constexpr double kPendulumMass = 1.0;
constexpr double kPendulumLength = 1.0;

double angle_normalize(double x) {
  // Python's % is a floor modulo, which std::fmod is not.
  const double period = 2 * kPi;
  double shifted = std::fmod(x + kPi, period);
  if (shifted < 0) shifted += period;
  return shifted - kPi;
}
}  // namespace

Pendulum::Pendulum()
    : PhysicalEnvironment("Pendulum-v1", 200,
                          Space::box({3}, {-1, -1, -kPendulumMaxSpeed}, {1, 1, kPendulumMaxSpeed}),
                          Space::box({1}, {-kPendulumMaxTorque}, {kPendulumMaxTorque})) {}

void Pendulum::reset_dynamics(uint64_t seed, std::span<float> observation) {
  std::mt19937_64 rng(seed);
  state_[0] = uniform(rng, -kPi, kPi);
  state_[1] = uniform(rng, -1.0, 1.0);
  observe(observation);
}

StepResult Pendulum::step_dynamics(std::span<const float> action, std::span<float> observation) {
  const auto [theta, theta_dot] = state_;
  // Gymnasium clips the float32 action and, under NumPy's promotion rules, keeps every
  // product with it in float32 before adding to the float64 state: so do we.
  const float torque =
      std::clamp(action[0], static_cast<float>(-kPendulumMaxTorque), static_cast<float>(kPendulumMaxTorque));
  const double cost = angle_normalize(theta) * angle_normalize(theta) + 0.1 * theta_dot * theta_dot +
                      static_cast<double>(0.001f * (torque * torque));
  const float torque_term =
      static_cast<float>(3.0 / (kPendulumMass * kPendulumLength * kPendulumLength)) * torque;
  double new_theta_dot = theta_dot + (3 * kPendulumG / (2 * kPendulumLength) * std::sin(theta) +
                                      static_cast<double>(torque_term)) *
                                         kPendulumDt;
  new_theta_dot = std::clamp(new_theta_dot, -kPendulumMaxSpeed, kPendulumMaxSpeed);
  state_ = {theta + new_theta_dot * kPendulumDt, new_theta_dot};
  observe(observation);
  return {-cost, false, false};
}

void Pendulum::observe(std::span<float> observation) const {
  observation[0] = static_cast<float>(std::cos(state_[0]));
  observation[1] = static_cast<float>(std::sin(state_[0]));
  observation[2] = static_cast<float>(state_[1]);
}

// Acrobot-v1 ----------------------------------------------------------------------------

namespace {
constexpr double kAcrobotDt = 0.2;
constexpr double kLinkLength1 = 1.0;
constexpr double kLinkMass1 = 1.0;
constexpr double kLinkMass2 = 1.0;
constexpr double kLinkCom1 = 0.5;
constexpr double kLinkCom2 = 0.5;
constexpr double kLinkMoi = 1.0;
constexpr double kMaxVel1 = 4 * kPi;
constexpr double kMaxVel2 = 9 * kPi;

using AcrobotState = std::array<double, 4>;

// Derivatives of (theta1, theta2, dtheta1, dtheta2) under `torque`: the "book" dynamics.
AcrobotState acrobot_derivatives(const AcrobotState& s, double torque) {
  constexpr double m1 = kLinkMass1, m2 = kLinkMass2, l1 = kLinkLength1, lc1 = kLinkCom1, lc2 = kLinkCom2;
  constexpr double i1 = kLinkMoi, i2 = kLinkMoi, g = 9.8;
  const auto [theta1, theta2, dtheta1, dtheta2] = s;
  const double d1 = m1 * lc1 * lc1 + m2 * (l1 * l1 + lc2 * lc2 + 2 * l1 * lc2 * std::cos(theta2)) + i1 + i2;
  const double d2 = m2 * (lc2 * lc2 + l1 * lc2 * std::cos(theta2)) + i2;
  const double phi2 = m2 * lc2 * g * std::cos(theta1 + theta2 - kPi / 2.0);
  const double phi1 = -m2 * l1 * lc2 * dtheta2 * dtheta2 * std::sin(theta2) -
                      2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * std::sin(theta2) +
                      (m1 * lc1 + m2 * l1) * g * std::cos(theta1 - kPi / 2) + phi2;
  const double ddtheta2 =
      (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1 * dtheta1 * std::sin(theta2) - phi2) /
      (m2 * lc2 * lc2 + i2 - d2 * d2 / d1);
  const double ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
  return {dtheta1, dtheta2, ddtheta1, ddtheta2};
}

AcrobotState axpy(const AcrobotState& y, double a, const AcrobotState& k) {
  return {y[0] + a * k[0], y[1] + a * k[1], y[2] + a * k[2], y[3] + a * k[3]};
}

double wrap(double x, double low, double high) {
  const double span = high - low;
  while (x > high) x -= span;
  while (x < low) x += span;
  return x;
}
}  // namespace

Acrobot::Acrobot()
    : PhysicalEnvironment(
          "Acrobot-v1", 500,
          Space::box({6}, {-1, -1, -1, -1, static_cast<float>(-kMaxVel1), static_cast<float>(-kMaxVel2)},
                     {1, 1, 1, 1, static_cast<float>(kMaxVel1), static_cast<float>(kMaxVel2)}),
          Space::discrete(3)) {}

void Acrobot::reset_dynamics(uint64_t seed, std::span<float> observation) {
  std::mt19937_64 rng(seed);
  for (double& value : state_) value = uniform(rng, -0.1, 0.1);
  observe(observation);
}

StepResult Acrobot::step_dynamics(std::span<const float> action, std::span<float> observation) {
  const double torque = static_cast<double>(action[0]) - 1.0;  // actions 0, 1, 2 -> -1, 0, +1
  // One classic Runge-Kutta step of length dt, as Gymnasium's rk4 over [0, dt].
  const double dt = kAcrobotDt, half = dt / 2.0;
  const AcrobotState k1 = acrobot_derivatives(state_, torque);
  const AcrobotState k2 = acrobot_derivatives(axpy(state_, half, k1), torque);
  const AcrobotState k3 = acrobot_derivatives(axpy(state_, half, k2), torque);
  const AcrobotState k4 = acrobot_derivatives(axpy(state_, dt, k3), torque);
  AcrobotState next;
  for (size_t i = 0; i < 4; ++i) next[i] = state_[i] + dt / 6.0 * (k1[i] + 2 * k2[i] + 2 * k3[i] + k4[i]);
  next[0] = wrap(next[0], -kPi, kPi);
  next[1] = wrap(next[1], -kPi, kPi);
  next[2] = std::min(std::max(next[2], -kMaxVel1), kMaxVel1);
  next[3] = std::min(std::max(next[3], -kMaxVel2), kMaxVel2);
  state_ = next;
  const bool terminated = -std::cos(state_[0]) - std::cos(state_[1] + state_[0]) > 1.0;
  observe(observation);
  return {terminated ? 0.0 : -1.0, terminated, false};
}

void Acrobot::observe(std::span<float> observation) const {
  observation[0] = static_cast<float>(std::cos(state_[0]));
  observation[1] = static_cast<float>(std::sin(state_[0]));
  observation[2] = static_cast<float>(std::cos(state_[1]));
  observation[3] = static_cast<float>(std::sin(state_[1]));
  observation[4] = static_cast<float>(state_[2]);
  observation[5] = static_cast<float>(state_[3]);
}

// MountainCar-v0 ------------------------------------------------------------------------

namespace {
constexpr double kMinPosition = -1.2;
constexpr double kMaxPosition = 0.6;
constexpr double kMaxSpeed = 0.07;
constexpr double kGoalPosition = 0.5;
constexpr double kCarForce = 0.001;
constexpr double kCarGravity = 0.0025;
}  // namespace

MountainCar::MountainCar()
    : PhysicalEnvironment("MountainCar-v0", 200,
                          Space::box({2}, {static_cast<float>(kMinPosition), static_cast<float>(-kMaxSpeed)},
                                     {static_cast<float>(kMaxPosition), static_cast<float>(kMaxSpeed)}),
                          Space::discrete(3)) {}

void MountainCar::reset_dynamics(uint64_t seed, std::span<float> observation) {
  std::mt19937_64 rng(seed);
  state_ = {uniform(rng, -0.6, -0.4), 0.0};
  observe(observation);
}

StepResult MountainCar::step_dynamics(std::span<const float> action, std::span<float> observation) {
  auto& [position, velocity] = state_;
  velocity += (static_cast<double>(action[0]) - 1) * kCarForce + std::cos(3 * position) * (-kCarGravity);
  velocity = std::clamp(velocity, -kMaxSpeed, kMaxSpeed);
  position += velocity;
  position = std::clamp(position, kMinPosition, kMaxPosition);
  if (position == kMinPosition && velocity < 0) velocity = 0;
  const bool terminated = position >= kGoalPosition && velocity >= 0;
  observe(observation);
  return {-1.0, terminated, false};
}

void MountainCar::observe(std::span<float> observation) const {
  observation[0] = static_cast<float>(state_[0]);
  observation[1] = static_cast<float>(state_[1]);
}

}  // namespace kvrl
