# Installs libactkit, its headers and a CMake package so that downstream
# projects can `find_package(actkit)` and link `actkit::actkit`.
include(CMakePackageConfigHelpers)

install(TARGETS actkit EXPORT actkitTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY core/include/ kernels/include/ layers/include/ converters/include/ allocator/include/ swap/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/include/actkit/core/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/actkit/core)
if(TARGET actkit_cli)
  install(TARGETS actkit_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

set(_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/actkit)
install(EXPORT actkitTargets NAMESPACE actkit:: DESTINATION ${_cmake_dir})
configure_package_config_file(cmake/actkitConfig.cmake.in ${PROJECT_BINARY_DIR}/actkitConfig.cmake
                              INSTALL_DESTINATION ${_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/actkitConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/actkitConfig.cmake ${PROJECT_BINARY_DIR}/actkitConfigVersion.cmake
        DESTINATION ${_cmake_dir})
