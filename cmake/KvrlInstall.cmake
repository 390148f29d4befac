# Installs the libraries, headers and the kvrl executable, and exports kvrlConfig.cmake
# so that other projects can find_package(kvrl).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(TARGETS kvrl_common kvrl_actor kvrl_learner EXPORT kvrlTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS kvrl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(_component common actor learner)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${_component}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${_component}
    FILES_MATCHING PATTERN "*.h")
endforeach()
install(EXPORT kvrlTargets NAMESPACE kvrl:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvrl)
file(WRITE ${PROJECT_BINARY_DIR}/kvrlConfig.cmake.in [=[
@PACKAGE_INIT@
include(CMakeFindDependencyMacro)
find_dependency(Torch)
find_dependency(MPI COMPONENTS C)
find_dependency(spdlog)
find_dependency(yaml-cpp)
include("${CMAKE_CURRENT_LIST_DIR}/kvrlTargets.cmake")
]=])
configure_package_config_file(${PROJECT_BINARY_DIR}/kvrlConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kvrlConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvrl)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kvrlConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kvrlConfig.cmake ${PROJECT_BINARY_DIR}/kvrlConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvrl)
