// libkvrl_gym_bridge.so: Gymnasium environments inside a kvrl process, through an
// embedded CPython (pybind11). Loaded by actor/gym_bridge.cpp on the first gym: id; it
// resolves kvrl's symbols (Environment, VectorEnv, Space, the errors) against the program.
#include <pybind11/embed.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>

#include "actor/gym_bridge.h"
#include "common/support/errors.h"

namespace py = pybind11;

namespace kvrl {
namespace {

constexpr const char* kInstallGymnasium =
    "pip install gymnasium (scripts/setup.sh installs it into ~/.cache/kvrl/venv)";

// The interpreter, started once and never finalised (NumPy cannot be re-initialised). Its
// prefix is the Python the build embedded; KVRL_PYTHON names another interpreter (a venv's
// bin/python) whose site-packages to use.
void start_python() {
  if (Py_IsInitialized()) return;
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.install_signal_handlers = 0;  // kvrl's own SIGINT/SIGTERM handling stays in force
  config.parse_argv = 0;
  const char* python = std::getenv("KVRL_PYTHON");
  const std::string executable = python != nullptr && *python != '\0' ? python : KVRL_EMBEDDED_PYTHON;
  // Python finds a venv's pyvenv.cfg, and so its site-packages, from the executable's path.
  PyStatus status = PyConfig_SetBytesString(&config, &config.program_name, executable.c_str());
  if (PyStatus_Exception(status)) {
    PyConfig_Clear(&config);
    throw InvalidArgumentError("cannot configure the embedded Python for '" + executable + "'");
  }
  try {
    py::initialize_interpreter(&config, 0, nullptr, /*add_program_dir_to_path=*/false);
  } catch (const std::exception& error) {
    throw InvalidArgumentError(
        "cannot start the embedded Python as '" + executable + "' (" + error.what() +
        "): set KVRL_PYTHON to a Python 3 executable whose site-packages hold gymnasium");
  }
  // Every use takes the GIL (gil_scoped_acquire), from whichever thread it runs on.
  PyEval_SaveThread();
}

// A Python exception as kvrl's error: its type, message and traceback.
[[noreturn]] void rethrow_python(const std::string& where, const py::error_already_set& error) {
  std::string trace;
  try {
    py::module_ traceback = py::module_::import("traceback");
    py::object lines = traceback.attr("format_exception")(error.type(), error.value(), error.trace());
    trace = py::str("").attr("join")(lines).cast<std::string>();
  } catch (const std::exception&) {
    trace = error.what();
  }
  throw EnvironmentError(where + " raised a Python exception:\n" + trace);
}

// How one Gymnasium space maps onto kvrl's flat float spaces.
struct SpaceMap {
  enum class Kind { kBox, kDiscrete, kMultiDiscrete };
  Kind kind = Kind::kBox;
  std::vector<int64_t> shape;    // Box: the element shape
  std::vector<int64_t> choices;  // Discrete: {n}; MultiDiscrete: nvec, flattened
  int64_t start = 0;             // Discrete: the first index
  Space space;                   // kvrl's view
  std::string dtype;             // Box: the actions' NumPy dtype
};

// A Python object owned by a C++ one: let go under the GIL, however the owner ends (a
// constructor that throws included: the GIL guard of its body is gone by then).
class PythonHandle {
 public:
  PythonHandle() = default;
  PythonHandle(const PythonHandle&) = delete;
  PythonHandle& operator=(const PythonHandle&) = delete;
  ~PythonHandle() {
    if (!object_) return;
    try {
      py::gil_scoped_acquire gil;
      object_ = py::object();
    } catch (const std::exception&) {
      object_.release();  // no interpreter to give it back to (the process is ending): let it go
    }
  }
  void set(py::object object) { object_ = std::move(object); }
  py::object attr(const char* name) const { return object_.attr(name); }

 private:
  py::object object_;
};

SpaceMap map_space(const std::string& where, const py::handle& space, bool is_action) {
  py::module_ spaces = py::module_::import("gymnasium.spaces");
  SpaceMap map;
  if (py::isinstance(space, spaces.attr("Box"))) {
    map.kind = SpaceMap::Kind::kBox;
    map.shape = space.attr("shape").cast<std::vector<int64_t>>();
    map.dtype = py::str(space.attr("dtype")).cast<std::string>();
    py::module_ np = py::module_::import("numpy");
    auto bound = [&](const char* name) {
      py::array_t<float> values = np.attr("asarray")(space.attr(name), "float32").attr("ravel")();
      return std::vector<float>(values.data(), values.data() + values.size());
    };
    // Images and grid codes (uint8) and flags (bool) stay one byte per value downstream.
    const bool bytes = !is_action && (map.dtype == "uint8" || map.dtype == "bool");
    map.space = Space::box(map.shape.empty() ? std::vector<int64_t>{1} : map.shape, bound("low"),
                           bound("high"), bytes ? ObservationElement::kUInt8 : ObservationElement::kFloat32);
    return map;
  }
  const bool discrete = py::isinstance(space, spaces.attr("Discrete"));
  if (discrete || py::isinstance(space, spaces.attr("MultiDiscrete"))) {
    map.kind = discrete ? SpaceMap::Kind::kDiscrete : SpaceMap::Kind::kMultiDiscrete;
    py::module_ np = py::module_::import("numpy");
    py::array_t<int64_t> nvec =
        np.attr("asarray")(discrete ? space.attr("n") : space.attr("nvec"), "int64").attr("ravel")();
    map.choices.assign(nvec.data(), nvec.data() + nvec.size());
    if (discrete) map.start = space.attr("start").cast<int64_t>();
    if (!discrete && py::array(space.attr("start")).attr("any")().cast<bool>()) {
      throw InvalidArgumentError(where + ": a MultiDiscrete space with a nonzero start is not supported");
    }
    const int64_t product =
        std::accumulate(map.choices.begin(), map.choices.end(), int64_t{1}, std::multiplies<>());
    const int64_t one_hot = std::accumulate(map.choices.begin(), map.choices.end(), int64_t{0});
    if (is_action) {
      if (product > (int64_t{1} << 20)) {
        throw InvalidArgumentError(where + ": a MultiDiscrete action space of " + std::to_string(product) +
                                   " combined choices is too many for one categorical (at most 2^20)");
      }
      map.space = Space::discrete(product);
    } else {
      map.space = Space::box({one_hot}, std::vector<float>(one_hot, 0.0f), std::vector<float>(one_hot, 1.0f));
    }
    return map;
  }
  throw InvalidArgumentError(where + ": its " + std::string(is_action ? "action" : "observation") +
                             " space " + py::repr(space).cast<std::string>() +
                             " is not supported (supported: Box of any shape, Discrete, MultiDiscrete)");
}

// Writes rows of Gymnasium observations ([N, ...] as given by a vector env, or one) as floats.
void write_observations(const SpaceMap& map, const py::handle& batch, int64_t rows, float* out) {
  const int64_t width = map.space.flat_size();
  if (map.kind == SpaceMap::Kind::kBox) {
    py::array_t<float, py::array::c_style | py::array::forcecast> values(
        py::reinterpret_borrow<py::object>(batch));
    if (values.size() != rows * width) {
      throw EnvironmentError("an observation of " +
                             std::to_string(values.size() / std::max<int64_t>(rows, 1)) +
                             " values does not fit its space of " + std::to_string(width));
    }
    std::copy(values.data(), values.data() + values.size(), out);
    return;
  }
  py::array_t<int64_t, py::array::c_style | py::array::forcecast> indices(
      py::reinterpret_borrow<py::object>(batch));
  const auto parts = static_cast<int64_t>(map.choices.size());
  std::fill(out, out + rows * width, 0.0f);
  for (int64_t row = 0; row < rows; ++row) {
    int64_t offset = 0;
    for (int64_t part = 0; part < parts; ++part) {
      const int64_t index = indices.data()[row * parts + part] - map.start;
      if (index >= 0 && index < map.choices[part]) out[row * width + offset + index] = 1.0f;
      offset += map.choices[part];
    }
  }
}

// Gymnasium actions ([rows, ...] when batched) from kvrl's flat floats.
py::object gym_actions(const SpaceMap& map, const float* actions, int64_t rows, bool batched) {
  py::module_ np = py::module_::import("numpy");
  if (map.kind == SpaceMap::Kind::kBox) {
    std::vector<py::ssize_t> shape(map.shape.begin(), map.shape.end());
    if (batched) shape.insert(shape.begin(), rows);
    py::array_t<float> values(shape);
    std::copy(actions, actions + rows * map.space.flat_size(), values.mutable_data());
    return values.attr("astype")(map.dtype);
  }
  const auto parts = static_cast<int64_t>(map.choices.size());
  py::array_t<int64_t> indices(std::vector<py::ssize_t>{rows, parts});
  for (int64_t row = 0; row < rows; ++row) {
    auto index = static_cast<int64_t>(actions[row]);
    for (int64_t part = parts - 1; part >= 0; --part) {  // the last component varies fastest
      indices.mutable_data()[row * parts + part] = index % map.choices[part] + map.start;
      index /= map.choices[part];
    }
  }
  if (map.kind == SpaceMap::Kind::kMultiDiscrete)
    return batched ? py::object(indices) : py::object(indices[py::int_(0)]);
  py::object flat = indices.attr("reshape")(rows);
  return batched ? flat : py::int_(flat[py::int_(0)].cast<int64_t>());
}

// env.kwargs text as Python values: int, float, bool, None or str.
bool is_decimal_integer(const std::string& text) {
  const size_t sign = !text.empty() && (text[0] == '-' || text[0] == '+') ? 1 : 0;
  return text.size() > sign && text.find_first_not_of("0123456789", sign) == std::string::npos;
}

// A decimal, finite float: "inf", "nan" and hexadecimal stay strings.
std::optional<double> decimal_float(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789+-.eE") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double number = std::strtod(text.c_str(), &end);
  if (*end != '\0' || !std::isfinite(number)) return std::nullopt;
  return number;
}

py::object python_value(const std::string& text) {
  if (text == "true" || text == "True") return py::bool_(true);
  if (text == "false" || text == "False") return py::bool_(false);
  if (text == "null" || text == "None") return py::none();
  if (is_decimal_integer(text)) return py::module_::import("builtins").attr("int")(text);  // exact, any size
  if (const std::optional<double> number = decimal_float(text)) return py::float_(*number);
  return py::str(text);
}

py::dict python_kwargs(const GymKwargs& kwargs) {
  py::dict out;
  for (const auto& [key, text] : kwargs) out[py::str(key)] = python_value(text);
  return out;
}

py::object import_gymnasium(const std::string& where) {
  try {
    return py::module_::import("gymnasium");
  } catch (const py::error_already_set& error) {
    throw InvalidArgumentError(where + " needs the Python package gymnasium, which the embedded Python (" +
                               py::module_::import("sys").attr("executable").cast<std::string>() +
                               ") cannot import (" + error.what() + "): " + kInstallGymnasium);
  }
}

// The Python object a "module:attribute" entry names (the attribute may be dotted).
py::object python_callable(const std::string& key, const std::string& entry) {
  const size_t colon = entry.find(':');
  if (colon == std::string::npos) {
    throw InvalidArgumentError(key + " '" + entry + "' is not a Python module:attribute");
  }
  try {
    py::object found = py::module_::import("importlib").attr("import_module")(entry.substr(0, colon));
    std::stringstream path(entry.substr(colon + 1));
    for (std::string part; std::getline(path, part, '.');) found = found.attr(part.c_str());
    return found;
  } catch (const py::error_already_set& error) {
    throw InvalidArgumentError(key + " '" + entry + "' cannot be loaded: " + error.what());
  }
}

// Runs the request's setup callables unless the id is registered already, so that a
// registration runs once per process however many environments are made.
void run_setup(const py::object& gym, const std::string& id, const GymRequest& request) {
  const std::string registered_id = id.substr(id.rfind(':') == std::string::npos ? 0 : id.rfind(':') + 1);
  if (request.setup.empty() || gym.attr("envs").attr("registry").contains(registered_id)) return;
  for (const std::string& entry : request.setup) {
    py::object setup = python_callable("env.gym_setup", entry);
    try {
      setup();
    } catch (const py::error_already_set& error) {
      throw InvalidArgumentError("env.gym_setup '" + entry + "' raised: " + error.what());
    }
  }
}

// The request's wrappers as a Python list of callables, each taking an environment.
py::list python_wrappers(const GymRequest& request) {
  py::list wrappers;
  for (const std::string& entry : request.wrappers)
    wrappers.append(python_callable("env.gym_wrappers", entry));
  return wrappers;
}

// One Gymnasium environment stepped on its own.
class GymEnvironment : public Environment {
 public:
  GymEnvironment(const std::string& id, const GymRequest& request) : name_(std::string(kGymPrefix) + id) {
    start_python();
    py::gil_scoped_acquire gil;
    py::object gym = import_gymnasium(name_);
    run_setup(gym, id, request);
    try {
      py::object env = gym.attr("make")(id, **python_kwargs(request.kwargs));
      for (const py::handle wrapper : python_wrappers(request)) env = wrapper(env);
      env_.set(env);
      observation_ = map_space(name_, env_.attr("observation_space"), false);
      action_ = map_space(name_, env_.attr("action_space"), true);
      py::object spec = env_.attr("spec");
      if (!spec.is_none() && !spec.attr("max_episode_steps").is_none()) {
        time_limit_ = spec.attr("max_episode_steps").cast<int64_t>();
      }
    } catch (const py::error_already_set& error) {
      throw InvalidArgumentError(name_ + ": gymnasium.make refused it: " + error.what());
    }
  }
  std::string name() const override { return name_; }
  const Space& observation_space() const override { return observation_.space; }
  const Space& action_space() const override { return action_.space; }
  int64_t time_limit() const override { return time_limit_; }

 protected:
  void reset_dynamics(uint64_t seed, std::span<float> observation) override {
    py::gil_scoped_acquire gil;
    try {
      py::tuple result = env_.attr("reset")(py::arg("seed") = seed);
      write_observations(observation_, result[0], 1, observation.data());
    } catch (const py::error_already_set& error) {
      rethrow_python(name_ + " reset()", error);
    }
  }

  StepResult step_dynamics(std::span<const float> action, std::span<float> observation) override {
    py::gil_scoped_acquire gil;
    try {
      py::tuple result = env_.attr("step")(gym_actions(action_, action.data(), 1, false));
      write_observations(observation_, result[0], 1, observation.data());
      return {result[1].cast<double>(), result[2].cast<bool>(), result[3].cast<bool>()};
    } catch (const py::error_already_set& error) {
      rethrow_python(name_ + " step()", error);
    }
  }

 private:
  std::string name_;
  PythonHandle env_;
  SpaceMap observation_, action_;
  int64_t time_limit_ = 0;
};

// Gymnasium's SyncVectorEnv, resetting an ended environment in the same step.
class GymVectorEnv : public VectorEnv {
 public:
  GymVectorEnv(const std::string& id, const GymRequest& request, int64_t num_envs, uint64_t seed,
               const GymEnvironment& prototype)
      : VectorEnv(num_envs, prototype.observation_space(), prototype.action_space()),
        name_(prototype.name()),
        seed_(seed) {
    py::gil_scoped_acquire gil;
    py::object gym = import_gymnasium(name_);
    try {
      py::dict vector_kwargs;
      vector_kwargs["autoreset_mode"] = gym.attr("vector").attr("AutoresetMode").attr("SAME_STEP");
      envs_.set(gym.attr("make_vec")(
          id, py::arg("num_envs") = num_envs, py::arg("vectorization_mode") = "sync",
          py::arg("vector_kwargs") = vector_kwargs, py::arg("wrappers") = python_wrappers(request),
          **python_kwargs(request.kwargs)));
      observation_ = map_space(name_, envs_.attr("single_observation_space"), false);
      action_ = map_space(name_, envs_.attr("single_action_space"), true);
    } catch (const py::error_already_set& error) {
      throw InvalidArgumentError(name_ + ": gymnasium.make_vec refused it: " + error.what());
    }
  }
  std::string name() const override { return name_; }

  void reset() override {
    py::gil_scoped_acquire gil;
    py::list seeds;
    // 32 bits of the stream's seed: environments seeding NumPy's legacy RandomState (MinAtar's)
    // refuse anything larger.
    for (int64_t i = 0; i < num_envs(); ++i) seeds.append(py::int_(stream_seed(seed_, i) >> 32));
    try {
      py::tuple result = envs_.attr("reset")(py::arg("seed") = seeds);
      write_observations(observation_, result[0], num_envs(), observations_.data());
    } catch (const py::error_already_set& error) {
      rethrow_python(name_ + " reset()", error);
    }
    std::fill(is_init_.begin(), is_init_.end(), 1);
    std::fill(rewards_.begin(), rewards_.end(), 0.0);
    std::fill(terminated_.begin(), terminated_.end(), 0);
    std::fill(truncated_.begin(), truncated_.end(), 0);
  }

  void step(std::span<const float> actions) override {
    check_action_count(actions);
    const auto width = static_cast<size_t>(action_size());
    for (int64_t i = 0; i < num_envs(); ++i) {
      check_action_in_space(name_ + " (environment " + std::to_string(i) + ")", action_space(),
                            actions.subspan(static_cast<size_t>(i) * width, width));
    }
    py::gil_scoped_acquire gil;
    try {
      py::tuple result = envs_.attr("step")(gym_actions(action_, actions.data(), num_envs(), true));
      write_observations(observation_, result[0], num_envs(), observations_.data());
      py::array_t<double, py::array::forcecast> rewards(result[1]);
      py::array_t<bool, py::array::forcecast> terminated(result[2]), truncated(result[3]);
      py::dict info = result[4];
      for (int64_t i = 0; i < num_envs(); ++i) {
        rewards_[i] = rewards.data()[i];
        terminated_[i] = terminated.data()[i];
        truncated_[i] = truncated.data()[i] && !terminated_[i];  // terminated wins, as in Environment::step
        is_init_[i] = terminated_[i] || truncated_[i];
        if (is_init_[i]) {
          const int64_t width = observation_size();
          write_observations(observation_, info["final_obs"][py::int_(i)], 1,
                             final_observations_.data() + i * width);
        }
      }
    } catch (const py::error_already_set& error) {
      rethrow_python(name_ + " step()", error);
    }
  }

 private:
  std::string name_;
  uint64_t seed_;
  PythonHandle envs_;
  SpaceMap observation_, action_;
};

Environment* make_environment(const std::string& id, const GymRequest& request) {
  return new GymEnvironment(id, request);
}

VectorEnv* make_vector_env(const std::string& id, const GymRequest& request, int64_t num_envs,
                           uint64_t seed) {
  const GymEnvironment prototype(id, request);
  return new GymVectorEnv(id, request, num_envs, seed, prototype);
}

}  // namespace
}  // namespace kvrl

extern "C" __attribute__((visibility("default"))) const kvrl::GymBridgeInfo* kvrl_gym_bridge_v1() {
  static const kvrl::GymBridgeInfo info{kvrl::kGymBridgeAbiVersion, kvrl::make_environment,
                                        kvrl::make_vector_env};
  return &info;
}
