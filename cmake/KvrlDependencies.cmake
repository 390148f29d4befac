# Finds every dependency with find_package and exposes what the CUDA/NCCL paths need.
# LibTorch comes from the torch wheel: scripts/setup.sh writes its CMake prefix to
# $KVRL_CACHE/torch_prefix, which is used when CMAKE_PREFIX_PATH does not already find Torch.

set(KVRL_CACHE "$ENV{KVRL_CACHE}")
if(NOT KVRL_CACHE)
  set(KVRL_CACHE "$ENV{HOME}/.cache/kvrl")
endif()
if(EXISTS "${KVRL_CACHE}/torch_prefix")
  file(READ "${KVRL_CACHE}/torch_prefix" _kvrl_torch_prefix)
  string(STRIP "${_kvrl_torch_prefix}" _kvrl_torch_prefix)
  list(APPEND CMAKE_PREFIX_PATH "${_kvrl_torch_prefix}")
endif()

# The wheel is a CUDA build: its TorchConfig looks for the toolkit. Point it at the
# system toolkit when the caller has not.
if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()

# No GPU is needed at configure time: name the architectures instead of letting Caffe2
# probe the installed GPUs (its probe also trips over C++20 in CUDA try_run projects).
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "8.0;9.0")
endif()
set(CMAKE_CUDA_STANDARD 17)
find_package(Torch REQUIRED)
if(NOT TARGET torch)
  message(FATAL_ERROR "LibTorch not found: run scripts/setup.sh, or pass -DCMAKE_PREFIX_PATH=$(python -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')")
endif()

# The wheel's CUDA libraries (libnccl, libcudart, cuBLAS, ...) sit in site-packages/nvidia,
# which Python preloads; a C++ binary must find them itself, ahead of the system toolkit
# (whose older libnccl lacks symbols libtorch_cuda needs). DT_RPATH, unlike DT_RUNPATH,
# also applies to libtorch's own dependencies.
get_filename_component(_kvrl_site_packages "${TORCH_INSTALL_PREFIX}" DIRECTORY)
file(GLOB KVRL_TORCH_RUNTIME_DIRS LIST_DIRECTORIES true "${_kvrl_site_packages}/nvidia/*/lib")
list(PREPEND KVRL_TORCH_RUNTIME_DIRS "${TORCH_INSTALL_PREFIX}/lib")
list(PREPEND CMAKE_BUILD_RPATH ${KVRL_TORCH_RUNTIME_DIRS})
list(PREPEND CMAKE_INSTALL_RPATH ${KVRL_TORCH_RUNTIME_DIRS})
string(REPLACE ";" ":" _kvrl_rpath_link "${KVRL_TORCH_RUNTIME_DIRS}")
add_link_options(LINKER:--disable-new-dtags "LINKER:-rpath-link,${_kvrl_rpath_link}")

find_package(MPI REQUIRED COMPONENTS C)
find_package(Boost 1.74 REQUIRED)
find_package(Threads REQUIRED)
find_package(spdlog REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 2.0 REQUIRED)
# The venv's Python (scripts/setup.sh): it runs the tools, and its library embeds in the
# optional Gymnasium bridge (actor/gym/), with pybind11.
if(NOT DEFINED Python3_EXECUTABLE AND EXISTS "${KVRL_CACHE}/venv/bin/python")
  set(Python3_EXECUTABLE "${KVRL_CACHE}/venv/bin/python")
endif()
find_package(Python3 COMPONENTS Interpreter OPTIONAL_COMPONENTS Development.Embed)
find_package(pybind11 2.10 CONFIG QUIET)
set(KVRL_HAVE_GYM_BRIDGE OFF)
if(Python3_Development.Embed_FOUND AND pybind11_FOUND)
  set(KVRL_HAVE_GYM_BRIDGE ON)
endif()

# Optional: the MuJoCo C library (native locomotion environments) and the folder of
# Gymnasium's model XML files, both found by scripts/setup.sh in its venv. Without them
# the build succeeds and asking for a MuJoCo environment says how to get them.
find_package(MuJoCo 3.0)
if(NOT DEFINED KVRL_MUJOCO_MODEL_DIR AND EXISTS "${KVRL_CACHE}/mujoco_model_dir")
  file(READ "${KVRL_CACHE}/mujoco_model_dir" _kvrl_mujoco_model_dir)
  string(STRIP "${_kvrl_mujoco_model_dir}" _kvrl_mujoco_model_dir)
  set(KVRL_MUJOCO_MODEL_DIR "${_kvrl_mujoco_model_dir}")
endif()
set(KVRL_MUJOCO_MODEL_DIR "${KVRL_MUJOCO_MODEL_DIR}" CACHE PATH
    "Gymnasium's MuJoCo model XML folder (gymnasium/envs/mujoco/assets); env.mujoco_model_dir overrides it")

set(KVRL_HAVE_CUDA OFF)
set(KVRL_HAVE_NCCL OFF)
if(NOT KVRL_WITH_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit)
  # Link the NCCL that libtorch_cuda uses (the wheel's), so one libnccl serves both;
  # the system toolkit's headers declare a subset of its API.
  if(NOT NCCL_LIBRARY AND EXISTS "${_kvrl_site_packages}/nvidia/nccl/lib/libnccl.so.2")
    set(NCCL_LIBRARY "${_kvrl_site_packages}/nvidia/nccl/lib/libnccl.so.2" CACHE FILEPATH "NCCL library")
  endif()
  find_package(NCCL)
  if(CUDAToolkit_FOUND AND NCCL_FOUND)
    set(KVRL_HAVE_CUDA ON)
    set(KVRL_HAVE_NCCL ON)
  elseif(KVRL_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KVRL_WITH_CUDA=ON but the CUDA toolkit (found: ${CUDAToolkit_FOUND}) or NCCL (found: ${NCCL_FOUND}) is missing: set -DCUDAToolkit_ROOT=/path and -DNCCL_ROOT=/path, or use -DKVRL_WITH_CUDA=AUTO")
  endif()
endif()
