# Installs the libraries, headers and the kvrl executable, and exports kvrlConfig.cmake
# so that other projects can find_package(kvrl).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
# Installed under the names used in the tree: kvrl::common (all of common/), kvrl::actor,
# kvrl::learner, and kvrl::common_model etc. for one concern of common/.
set(_kvrl_libraries kvrl_common kvrl_actor kvrl_learner)
foreach(_component common actor learner)
  set_target_properties(kvrl_${_component} PROPERTIES EXPORT_NAME ${_component})
endforeach()
foreach(_concern support wire io model comm)
  set_target_properties(kvrl_common_${_concern} PROPERTIES EXPORT_NAME common_${_concern})
  list(APPEND _kvrl_libraries kvrl_common_${_concern})
endforeach()
install(TARGETS ${_kvrl_libraries} EXPORT kvrlTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS kvrl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(_component common actor learner)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${_component}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${_component}
    FILES_MATCHING PATTERN "*.h")  # with common/'s subfolders
endforeach()
install(EXPORT kvrlTargets NAMESPACE kvrl:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvrl)
# What kvrl's targets link, found again in the consumer: the libraries are static, so even
# their private dependencies (spdlog, Boost, nlohmann-json, CUDA and NCCL) must exist there.
set(KVRL_CONFIG_HAVE_CUDA ${KVRL_HAVE_CUDA})
if(KVRL_HAVE_CUDA)
  install(FILES ${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvrl)
endif()
set(KVRL_CONFIG_HAVE_MUJOCO ${MuJoCo_FOUND})
if(MuJoCo_FOUND)
  install(FILES ${PROJECT_SOURCE_DIR}/cmake/FindMuJoCo.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvrl)
endif()
file(WRITE ${PROJECT_BINARY_DIR}/kvrlConfig.cmake.in [=[
@PACKAGE_INIT@
include(CMakeFindDependencyMacro)
# LibTorch's CUDA build probes the GPUs at configure time unless told the architectures;
# kvrl's were chosen without a GPU, and so are these (cmake/KvrlDependencies.cmake).
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "@TORCH_CUDA_ARCH_LIST@")
endif()
if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS "@CUDAToolkit_ROOT@")
  set(CUDAToolkit_ROOT "@CUDAToolkit_ROOT@")
endif()
if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS "@CMAKE_CUDA_COMPILER@")
  set(CMAKE_CUDA_COMPILER "@CMAKE_CUDA_COMPILER@")
endif()
set(CMAKE_CUDA_STANDARD 17)
find_dependency(Torch)
find_dependency(MPI COMPONENTS C)
find_dependency(Boost 1.74)
find_dependency(Threads)
find_dependency(spdlog)
find_dependency(yaml-cpp)
find_dependency(nlohmann_json 3.10)
if(@KVRL_CONFIG_HAVE_CUDA@)
  find_dependency(CUDAToolkit)
  if(NOT TARGET NCCL::nccl)
    list(APPEND CMAKE_MODULE_PATH "${CMAKE_CURRENT_LIST_DIR}")
    # The libnccl kvrl linked is libtorch_cuda's (the wheel's), not the toolkit's older one.
    set(NCCL_LIBRARY "@NCCL_LIBRARY@" CACHE FILEPATH "the NCCL library kvrl was built with")
    set(NCCL_INCLUDE_DIR "@NCCL_INCLUDE_DIR@" CACHE PATH "the NCCL headers kvrl was built with")
    find_dependency(NCCL)
  endif()
endif()
if(@KVRL_CONFIG_HAVE_MUJOCO@ AND NOT TARGET MuJoCo::mujoco)
  # kvrl::actor links the MuJoCo C library it was built with (the mujoco-core wheel's).
  list(APPEND CMAKE_MODULE_PATH "${CMAKE_CURRENT_LIST_DIR}")
  set(MuJoCo_LIBRARY "@MuJoCo_LIBRARY@" CACHE FILEPATH "the MuJoCo library kvrl was built with")
  set(MuJoCo_INCLUDE_DIR "@MuJoCo_INCLUDE_DIR@" CACHE PATH "the MuJoCo headers kvrl was built with")
  find_dependency(MuJoCo)
endif()
include("${CMAKE_CURRENT_LIST_DIR}/kvrlTargets.cmake")
]=])
configure_package_config_file(${PROJECT_BINARY_DIR}/kvrlConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kvrlConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvrl)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kvrlConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kvrlConfig.cmake ${PROJECT_BINARY_DIR}/kvrlConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvrl)
