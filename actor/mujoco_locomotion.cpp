#include "actor/mujoco_locomotion.h"

#include <mujoco/mujoco.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <mutex>
#include <random>
#include <vector>

#include "common/support/errors.h"

namespace kvrl {
namespace {

constexpr int64_t kTimeLimit = 1000;  // Gymnasium registers every v5 locomotion task with 1000
constexpr double kNoClip = std::numeric_limits<double>::infinity();

struct ModelDeleter {
  void operator()(mjModel* model) const { mj_deleteModel(model); }
};
struct DataDeleter {
  void operator()(mjData* data) const { mj_deleteData(data); }
};

// What distinguishes one locomotion task from another; the options carry the numbers a
// user may change (Gymnasium's keyword arguments), this the structure they may not.
struct LocomotionTask {
  const char* xml_file;
  int64_t skipped_positions;     // leading qpos left out of observations: x (planar) or x and y (Ant)
  double velocity_clip;          // observed qvel clipped to +-this (Hopper, Walker2d)
  bool gaussian_velocity_noise;  // reset qvel noise ~ scale * N(0, 1) instead of U(-scale, scale)
  bool contact_forces;           // Ant: observes and pays for the bodies' external forces
  // Whether the body is healthy; null for tasks that never terminate (HalfCheetah).
  bool (*healthy)(const mjModel& model, const mjData& data);
  EnvOptions defaults;
};

bool hopper_healthy(const mjModel& model, const mjData& data) {
  // Gymnasium: every state entry but x and z strictly within (-100, 100).
  for (int i = 2; i < model.nq; ++i) {
    if (!(data.qpos[i] > -100.0 && data.qpos[i] < 100.0)) return false;
  }
  for (int i = 0; i < model.nv; ++i) {
    if (!(data.qvel[i] > -100.0 && data.qvel[i] < 100.0)) return false;
  }
  const double z = data.qpos[1];
  const double angle = data.qpos[2];
  return z > 0.7 && angle > -0.2 && angle < 0.2;
}

bool walker_healthy(const mjModel&, const mjData& data) {
  const double z = data.qpos[1];
  const double angle = data.qpos[2];
  return z > 0.8 && z < 2.0 && angle > -1.0 && angle < 1.0;
}

bool ant_healthy(const mjModel& model, const mjData& data) {
  for (int i = 0; i < model.nq; ++i) {
    if (!std::isfinite(data.qpos[i])) return false;
  }
  for (int i = 0; i < model.nv; ++i) {
    if (!std::isfinite(data.qvel[i])) return false;
  }
  return data.qpos[2] >= 0.2 && data.qpos[2] <= 1.0;  // inclusive, unlike the planar walkers
}

// MuJoCo's default handler also appends every warning to MUJOCO_LOG.TXT in the working
// directory: an actor rank writes no files there.
void print_mujoco_warning(const char* message) { std::fprintf(stderr, "MuJoCo warning: %s\n", message); }

// Hopper's and Walker2d's options alike: Gymnasium gives both the same defaults.
EnvOptions planar_walker_defaults() {
  return {{"frame_skip", 4},       {"forward_reward_weight", 1.0},  {"ctrl_cost_weight", 1e-3},
          {"healthy_reward", 1.0}, {"terminate_when_unhealthy", 1}, {"reset_noise_scale", 5e-3}};
}

const LocomotionTask& task_named(const std::string& name) {
  static const std::map<std::string, LocomotionTask> tasks{
      {"Hopper-v5", {"hopper.xml", 1, 10.0, false, false, hopper_healthy, planar_walker_defaults()}},
      {"HalfCheetah-v5",
       {"half_cheetah.xml",
        1,
        kNoClip,
        true,
        false,
        nullptr,
        {{"frame_skip", 5},
         {"forward_reward_weight", 1.0},
         {"ctrl_cost_weight", 0.1},
         {"reset_noise_scale", 0.1}}}},
      {"Walker2d-v5", {"walker2d_v5.xml", 1, 10.0, false, false, walker_healthy, planar_walker_defaults()}},
      {"Ant-v5",
       {"ant.xml",
        2,
        kNoClip,
        true,
        true,
        ant_healthy,
        {{"frame_skip", 5},
         {"forward_reward_weight", 1.0},
         {"ctrl_cost_weight", 0.5},
         {"contact_cost_weight", 5e-4},
         {"healthy_reward", 1.0},
         {"terminate_when_unhealthy", 1},
         {"reset_noise_scale", 0.1}}}},
  };
  const auto it = tasks.find(name);
  if (it == tasks.end()) {
    std::string names;
    for (const auto& known : kMujocoEnvironmentNames)
      names += (names.empty() ? "" : ", ") + std::string(known);
    throw InvalidArgumentError("unknown MuJoCo environment '" + name + "' (known: " + names + ")");
  }
  return it->second;
}

// NumPy's sum of a contiguous array (pairwise in blocks of eight), so that costs summed
// in float32 round as Gymnasium's do.
template <typename T>
T numpy_sum(const T* values, size_t n) {
  if (n < 8) {
    T sum = 0;
    for (size_t i = 0; i < n; ++i) sum += values[i];
    return sum;
  }
  if (n <= 128) {
    T partial[8];
    std::copy(values, values + 8, partial);
    size_t i = 8;
    for (; i < n - (n % 8); i += 8) {
      for (size_t j = 0; j < 8; ++j) partial[j] += values[i + j];
    }
    T sum = ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
            ((partial[4] + partial[5]) + (partial[6] + partial[7]));
    for (; i < n; ++i) sum += values[i];
    return sum;
  }
  size_t half = n / 2;
  half -= half % 8;
  return numpy_sum(values, half) + numpy_sum(values + half, n - half);
}

int64_t positive_integer_option(const std::string& env, const EnvOptions& options, const std::string& key) {
  const double value = options.at(key);
  if (!(value >= 1 && value == std::floor(value) && value <= 1000)) {
    throw InvalidArgumentError(env + ": option " + key + " (" + std::to_string(value) +
                               ") must be an integer in [1, 1000]");
  }
  return static_cast<int64_t>(value);
}

bool flag_option(const std::string& env, const EnvOptions& options, const std::string& key) {
  const double value = options.at(key);
  if (value != 0 && value != 1) {
    throw InvalidArgumentError(env + ": option " + key + " (" + std::to_string(value) + ") must be 0 or 1");
  }
  return value == 1;
}

double finite_option(const std::string& env, const EnvOptions& options, const std::string& key) {
  const double value = options.at(key);
  if (!std::isfinite(value)) {
    throw InvalidArgumentError(env + ": option " + key + " (" + std::to_string(value) + ") must be finite");
  }
  return value;
}

std::string model_path(const std::string& env, const LocomotionTask& task, const std::string& model_dir) {
  const std::string dir = model_dir.empty() ? default_mujoco_model_dir() : model_dir;
  if (dir.empty()) {
    throw InvalidArgumentError(env +
                               " needs Gymnasium's MuJoCo model folder: set env.mujoco_model_dir to "
                               "gymnasium/envs/mujoco/assets in a Python environment with gymnasium, or run "
                               "scripts/setup.sh and reconfigure, which finds it");
  }
  const std::filesystem::path path = std::filesystem::path(dir) / task.xml_file;
  if (!std::filesystem::is_regular_file(path)) {
    throw InvalidArgumentError(env + ": model file '" + path.string() +
                               "' not found: env.mujoco_model_dir ('" + dir +
                               "') must be Gymnasium's gymnasium/envs/mujoco/assets folder");
  }
  return path.string();
}

class LocomotionEnvironment : public Environment {
 public:
  LocomotionEnvironment(std::string name, const LocomotionTask& task, const EnvOptions& options,
                        const LocomotionSettings& settings)
      : name_(std::move(name)),
        task_(task),
        observe_(settings.observe),
        frame_skip_(positive_integer_option(name_, options, "frame_skip")),
        forward_reward_weight_(finite_option(name_, options, "forward_reward_weight")),
        ctrl_cost_weight_(finite_option(name_, options, "ctrl_cost_weight")),
        contact_cost_weight_(options.count("contact_cost_weight")
                                 ? finite_option(name_, options, "contact_cost_weight")
                                 : 0.0),
        healthy_reward_(options.count("healthy_reward") ? finite_option(name_, options, "healthy_reward")
                                                        : 0.0),
        terminate_when_unhealthy_(options.count("terminate_when_unhealthy") &&
                                  flag_option(name_, options, "terminate_when_unhealthy")),
        reset_noise_scale_(finite_option(name_, options, "reset_noise_scale")) {
    if (reset_noise_scale_ < 0) {
      throw InvalidArgumentError(name_ + ": option reset_noise_scale (" + std::to_string(reset_noise_scale_) +
                                 ") must be >= 0");
    }
    load_model(model_path(name_, task_, settings.model_dir));
    init_qpos_.assign(model_->qpos0, model_->qpos0 + model_->nq);
    observation_space_ = Space::box({observed_size()}, std::vector<float>(observed_size(), -kInf),
                                    std::vector<float>(observed_size(), kInf));
    std::vector<float> low(model_->nu), high(model_->nu);
    for (int i = 0; i < model_->nu; ++i) {
      low[i] = static_cast<float>(model_->actuator_ctrlrange[2 * static_cast<ptrdiff_t>(i)]);
      high[i] = static_cast<float>(model_->actuator_ctrlrange[2 * static_cast<ptrdiff_t>(i) + 1]);
    }
    action_space_ = Space::box({model_->nu}, std::move(low), std::move(high));
    action_squares_.resize(static_cast<size_t>(model_->nu));
    if (task_.contact_forces) force_squares_.resize(6 * static_cast<size_t>(model_->nbody));
  }

  std::string name() const override { return name_; }
  const Space& observation_space() const override { return observation_space_; }
  const Space& action_space() const override { return action_space_; }
  int64_t time_limit() const override { return kTimeLimit; }

  // state: [qpos, qvel], as Gymnasium's set_state takes them.
  void set_state(std::span<const double> state, std::span<float> observation) override {
    const size_t expected = static_cast<size_t>(model_->nq + model_->nv);
    if (state.size() != expected) {
      throw InvalidArgumentError(name_ + ": state has " + std::to_string(state.size()) +
                                 " values, expected " + std::to_string(expected) + " (qpos: " +
                                 std::to_string(model_->nq) + ", qvel: " + std::to_string(model_->nv) + ")");
    }
    set_physics(state.first(model_->nq), state.subspan(model_->nq));
    observe(observation);
  }

 protected:
  void reset_dynamics(uint64_t seed, std::span<float> observation) override {
    rng_.seed(seed);
    mj_resetData(model_.get(), data_.get());
    const double scale = reset_noise_scale_;
    std::uniform_real_distribution<double> uniform(-scale, scale);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<double> qpos(init_qpos_), qvel(model_->nv, 0.0);
    for (double& q : qpos) q += uniform(rng_);
    for (double& v : qvel) v += task_.gaussian_velocity_noise ? scale * normal(rng_) : uniform(rng_);
    set_physics(qpos, qvel);
    observe(observation);
  }

  StepResult step_dynamics(std::span<const float> action, std::span<float> observation) override {
    const double x_before = x_position();
    for (int i = 0; i < model_->nu; ++i) data_->ctrl[i] = action[i];
    for (int64_t k = 0; k < frame_skip_; ++k) mj_step(model_.get(), data_.get());
    // Gymnasium also calls it after every step; it computes the bodies' external forces,
    // which only Ant observes and pays for, and nothing the next step reads.
    if (task_.contact_forces) mj_rnePostConstraint(model_.get(), data_.get());
    const double x_velocity =
        (x_position() - x_before) / (model_->opt.timestep * static_cast<double>(frame_skip_));
    observe(observation);

    const bool healthy = task_.healthy == nullptr || task_.healthy(*model_, *data_);
    // Gymnasium sums the float32 action's squares in float32 and, under NumPy 2's
    // promotion rules, keeps the product with the weight in float32 too.
    std::transform(action.begin(), action.end(), action_squares_.begin(), [](float a) { return a * a; });
    const float ctrl_cost =
        static_cast<float>(ctrl_cost_weight_) * numpy_sum(action_squares_.data(), action_squares_.size());
    double costs = ctrl_cost;
    if (task_.contact_forces) costs += contact_cost_weight_ * contact_force_squares();
    const double rewards = forward_reward_weight_ * x_velocity + (healthy ? healthy_reward_ : 0.0);
    return {rewards - costs, terminate_when_unhealthy_ && !healthy, false};
  }

 private:
  void load_model(const std::string& path) {
    static std::once_flag warnings_to_stderr;
    std::call_once(warnings_to_stderr, [] { mju_user_warning = print_mujoco_warning; });
    char error[1000] = "";
    model_.reset(mj_loadXML(path.c_str(), nullptr, error, sizeof(error)));
    if (!model_) throw InvalidArgumentError(name_ + ": MuJoCo cannot load '" + path + "': " + error);
    data_.reset(mj_makeData(model_.get()));
    if (!data_) throw InvalidArgumentError(name_ + ": MuJoCo cannot allocate data for '" + path + "'");
  }

  void set_physics(std::span<const double> qpos, std::span<const double> qvel) {
    std::copy(qpos.begin(), qpos.end(), data_->qpos);
    std::copy(qvel.begin(), qvel.end(), data_->qvel);
    mj_forward(model_.get(), data_.get());
  }

  // Ant measures its torso's position in the world frame; the planar walkers their root x.
  double x_position() const {
    return task_.contact_forces ? data_->xpos[ptrdiff_t{3} * kAntMainBody] : data_->qpos[0];
  }

  int64_t observed_size() const {
    const int64_t positions = model_->nq - task_.skipped_positions;
    const int64_t velocities = model_->nv;
    const int64_t forces = task_.contact_forces ? 6 * (model_->nbody - 1) : 0;
    switch (observe_) {
      case ObservedPart::kPositions:
        return positions;
      case ObservedPart::kVelocities:
        return velocities;
      case ObservedPart::kAll:
        break;
    }
    return positions + velocities + forces;
  }

  void observe(std::span<float> observation) const {
    float* out = observation.data();
    if (observe_ != ObservedPart::kVelocities) {
      for (int i = static_cast<int>(task_.skipped_positions); i < model_->nq; ++i)
        *out++ = static_cast<float>(data_->qpos[i]);
    }
    if (observe_ != ObservedPart::kPositions) {
      const double clip = task_.velocity_clip;
      for (int i = 0; i < model_->nv; ++i)
        *out++ = static_cast<float>(std::clamp(data_->qvel[i], -clip, clip));
    }
    if (observe_ == ObservedPart::kAll && task_.contact_forces) {
      for (int i = 6; i < 6 * model_->nbody; ++i)
        *out++ = static_cast<float>(std::clamp(data_->cfrc_ext[i], -1.0, 1.0));
    }
  }

  // Sum of the squared clipped external forces of every body, the world's included.
  double contact_force_squares() {
    for (size_t i = 0; i < force_squares_.size(); ++i) {
      const double force = std::clamp(data_->cfrc_ext[i], -1.0, 1.0);
      force_squares_[i] = force * force;
    }
    return numpy_sum(force_squares_.data(), force_squares_.size());
  }

  static constexpr int kAntMainBody = 1;  // the torso
  static constexpr float kInf = std::numeric_limits<float>::infinity();

  std::string name_;
  const LocomotionTask& task_;
  ObservedPart observe_;
  int64_t frame_skip_;
  double forward_reward_weight_, ctrl_cost_weight_, contact_cost_weight_, healthy_reward_;
  bool terminate_when_unhealthy_;
  double reset_noise_scale_;
  std::unique_ptr<mjModel, ModelDeleter> model_;
  std::unique_ptr<mjData, DataDeleter> data_;
  std::vector<double> init_qpos_;
  // Scratch for the costs' sums, sized once: the step allocates nothing.
  std::vector<float> action_squares_;
  std::vector<double> force_squares_;
  std::mt19937_64 rng_;
  Space observation_space_, action_space_;
};

}  // namespace

bool mujoco_available() { return true; }

std::string mujoco_version() { return mj_versionString(); }

std::string default_mujoco_model_dir() { return KVRL_MUJOCO_MODEL_DIR; }

EnvOptions mujoco_environment_defaults(const std::string& name) { return task_named(name).defaults; }

std::unique_ptr<Environment> make_mujoco_environment(const std::string& name, const EnvOptions& options,
                                                     const LocomotionSettings& settings) {
  return std::make_unique<LocomotionEnvironment>(name, task_named(name), options, settings);
}

}  // namespace kvrl
