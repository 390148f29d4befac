# Finds the MuJoCo C library and defines the IMPORTED target MuJoCo::mujoco.
# The library comes from PyPI: the mujoco-core wheel (a dependency of mujoco) holds
# mujoco/include/mujoco/*.h and mujoco/libmujoco.so.<version>, with no CMake config and
# no unversioned libmujoco.so. scripts/setup.sh installs it into the same venv as torch and
# writes that mujoco/ folder to $KVRL_CACHE/mujoco_prefix.
# Hints: MUJOCO_ROOT (CMake or environment): a folder holding include/mujoco/mujoco.h and
# libmujoco.so*. Sets MuJoCo_FOUND, MuJoCo_VERSION, MuJoCo_INCLUDE_DIR, MuJoCo_LIBRARY.
set(_mujoco_hints ${MUJOCO_ROOT} $ENV{MUJOCO_ROOT})
if(EXISTS "${KVRL_CACHE}/mujoco_prefix")
  file(READ "${KVRL_CACHE}/mujoco_prefix" _mujoco_prefix)
  string(STRIP "${_mujoco_prefix}" _mujoco_prefix)
  list(APPEND _mujoco_hints "${_mujoco_prefix}")
endif()

find_path(MuJoCo_INCLUDE_DIR mujoco/mujoco.h HINTS ${_mujoco_hints} PATH_SUFFIXES include)
if(NOT MuJoCo_LIBRARY)
  # The wheel's library is versioned only (libmujoco.so.4.0.1): find_library would miss it.
  foreach(_dir IN LISTS _mujoco_hints)
    file(GLOB _mujoco_candidates "${_dir}/libmujoco.so*" "${_dir}/lib/libmujoco.so*")
    if(_mujoco_candidates)
      list(SORT _mujoco_candidates)
      list(GET _mujoco_candidates 0 _mujoco_library)
      set(MuJoCo_LIBRARY "${_mujoco_library}" CACHE FILEPATH "MuJoCo C library")
      break()
    endif()
  endforeach()
endif()
if(NOT MuJoCo_LIBRARY)
  find_library(MuJoCo_LIBRARY NAMES mujoco HINTS ${_mujoco_hints} PATH_SUFFIXES lib)
endif()

if(MuJoCo_INCLUDE_DIR AND EXISTS "${MuJoCo_INCLUDE_DIR}/mujoco/mujoco.h")
  file(STRINGS "${MuJoCo_INCLUDE_DIR}/mujoco/mujoco.h" _mujoco_version_line REGEX "^#define mjVERSION_HEADER ")
  string(REGEX REPLACE ".*mjVERSION_HEADER ([0-9]+).*" "\\1" _mujoco_number "${_mujoco_version_line}")
  # 4000001 is 4.0.1: major * 10^6 + minor * 10^3 + patch.
  math(EXPR _mujoco_major "${_mujoco_number} / 1000000")
  math(EXPR _mujoco_minor "(${_mujoco_number} / 1000) % 1000")
  math(EXPR _mujoco_patch "${_mujoco_number} % 1000")
  set(MuJoCo_VERSION "${_mujoco_major}.${_mujoco_minor}.${_mujoco_patch}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(MuJoCo
  REQUIRED_VARS MuJoCo_LIBRARY MuJoCo_INCLUDE_DIR
  VERSION_VAR MuJoCo_VERSION
  REASON_FAILURE_MESSAGE "MuJoCo not found: run scripts/setup.sh (installs the mujoco wheel) or set -DMUJOCO_ROOT=/path")

if(MuJoCo_FOUND AND NOT TARGET MuJoCo::mujoco)
  add_library(MuJoCo::mujoco SHARED IMPORTED)
  get_filename_component(_mujoco_soname "${MuJoCo_LIBRARY}" NAME)
  set_target_properties(MuJoCo::mujoco PROPERTIES
    IMPORTED_LOCATION "${MuJoCo_LIBRARY}"
    IMPORTED_SONAME "${_mujoco_soname}"
    INTERFACE_INCLUDE_DIRECTORIES "${MuJoCo_INCLUDE_DIR}")
endif()
mark_as_advanced(MuJoCo_INCLUDE_DIR MuJoCo_LIBRARY)
