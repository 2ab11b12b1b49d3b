# `cmake --install` lays out headers, the static library and exported targets so that another
# project can `find_package(echelon)` and link `echelon::echelon`.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(TARGETS echelon EXPORT echelonTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/echelon)
foreach(dir base cuda tensor autograd layers data parallel)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/echelon
          FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
endforeach()
install(EXPORT echelonTargets NAMESPACE echelon:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/echelon)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/echelonConfig.cmake.in
  ${PROJECT_BINARY_DIR}/echelonConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/echelon)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/echelonConfigVersion.cmake COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/echelonConfig.cmake ${PROJECT_BINARY_DIR}/echelonConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/echelon)
