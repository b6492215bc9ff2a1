# Install rules and the CMake package: `cmake --install` puts the headers,
# both libraries, the CLI and step5Config.cmake under the prefix, so that
# `find_package(step5 CONFIG)` gives step5::step5 (the runtime) and
# step5::testing (oracle, simulator, case files).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(STEP5_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/step5)

install(TARGETS step5 step5_testing EXPORT step5Targets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT step5_development
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT step5_development
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/step5 DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  COMPONENT step5_development)
if(TARGET step5attn)
  install(TARGETS step5attn RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT step5_cli)
endif()

install(EXPORT step5Targets NAMESPACE step5:: DESTINATION ${STEP5_CMAKE_DIR}
  COMPONENT step5_development)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/step5Config.cmake.in
  ${PROJECT_BINARY_DIR}/step5Config.cmake INSTALL_DESTINATION ${STEP5_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/step5ConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/step5Config.cmake ${PROJECT_BINARY_DIR}/step5ConfigVersion.cmake
  DESTINATION ${STEP5_CMAKE_DIR} COMPONENT step5_development)
