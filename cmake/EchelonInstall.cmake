# `cmake --install` lays out the headers (include/echelon/FOLDER/..., include/echelon/echelon.h),
# one static library per layer and exported targets, so that another project can
# `find_package(echelon)`, link `echelon::echelon` and `#include <echelon/echelon.h>`
# (tests/install/ is such a project; CI builds it).
include(CMakePackageConfigHelpers)
get_property(layers GLOBAL PROPERTY ECHELON_LAYERS)
install(TARGETS ${layers} echelon EXPORT echelonTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/echelon/echelon.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/echelon)
install(EXPORT echelonTargets NAMESPACE echelon:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/echelon)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/echelonConfig.cmake.in
  ${PROJECT_BINARY_DIR}/echelonConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/echelon)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/echelonConfigVersion.cmake COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/echelonConfig.cmake ${PROJECT_BINARY_DIR}/echelonConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/echelon)
