# Installs libactkit, its headers and a CMake package so that downstream
# projects can `find_package(actkit)` and link `actkit::actkit`.
include(CMakePackageConfigHelpers)

install(TARGETS actkit EXPORT actkitTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# libactkit opens its SentencePiece plug-in from its own folder
# (text/src/sentencepiece_plugin.h).
install(TARGETS actkit_sentencepiece LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(m IN LISTS ACTKIT_LIBRARY_MODULES)
  install(DIRECTORY ${m}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
endforeach()
install(FILES ${PROJECT_BINARY_DIR}/include/actkit/core/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/actkit/core)
if(TARGET actkit_cli)
  # Found next to the installed library wherever the prefix is: the loader
  # does not search most prefixes on its own.
  file(RELATIVE_PATH _lib_from_bin ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
  # LibTorch, TBB and liburing outside the loader's paths (a PyTorch wheel,
  # a private prefix) are found where the build found them.
  set(_cli_rpath "$ORIGIN/${_lib_from_bin}")
  if(NOT ACTKIT_TORCH_LIB_DIR IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
    list(APPEND _cli_rpath "${ACTKIT_TORCH_LIB_DIR}")
  endif()
  set_target_properties(actkit_cli PROPERTIES INSTALL_RPATH "${_cli_rpath}" INSTALL_RPATH_USE_LINK_PATH ON)
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
