# `cmake --install build --prefix P` puts libnvst.a, include/nvst/ and the
# package config under P, so another project can
#   find_package(nvst CONFIG REQUIRED)   # with P in CMAKE_PREFIX_PATH
#   target_link_libraries(app PRIVATE nvst::nvst)
# The build folder works as a prefix too (export() below), without installing.
# The library's device code is relocatable: a program that links it needs a
# device link (CUDA enabled, CUDA_RESOLVE_DEVICE_SYMBOLS ON; see
# examples/cpp/CMakeLists.txt). libfabric and hwloc are found where this
# build found them.
include(CMakePackageConfigHelpers)
set(NVST_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/nvst)

install(TARGETS nvst EXPORT nvstTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/nvst DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
install(EXPORT nvstTargets NAMESPACE nvst:: DESTINATION ${NVST_CMAKE_DIR} COMPONENT dev)
export(EXPORT nvstTargets NAMESPACE nvst:: FILE ${PROJECT_BINARY_DIR}/nvstTargets.cmake)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/nvstConfig.cmake.in ${PROJECT_BINARY_DIR}/nvstConfig.cmake
                              INSTALL_DESTINATION ${NVST_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/nvstConfigVersion.cmake VERSION ${PROJECT_VERSION}
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/nvstConfig.cmake ${PROJECT_BINARY_DIR}/nvstConfigVersion.cmake
        DESTINATION ${NVST_CMAKE_DIR} COMPONENT dev)
