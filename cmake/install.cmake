# SPDX-License-Identifier: Apache-2.0
# Installing the library as a CMake package: `cmake --install build --prefix P`, then in another
# project `find_package(mlarope)` and `target_link_libraries(app PRIVATE mlarope::mlarope)`.
# The build tree exports the same targets (build/mlaropeTargets.cmake) for use without installing.
include(CMakePackageConfigHelpers)

set(mlarope_export_targets mlarope_api mlarope_host)
if(TARGET mlarope_cuda)
  list(APPEND mlarope_export_targets mlarope_cuda)
endif()
set_target_properties(mlarope_api PROPERTIES EXPORT_NAME api)
set_target_properties(mlarope_host PROPERTIES EXPORT_NAME mlarope)
if(TARGET mlarope_cuda)
  set_target_properties(mlarope_cuda PROPERTIES EXPORT_NAME cuda)
endif()
add_library(mlarope::mlarope ALIAS mlarope_host)
add_library(mlarope::api ALIAS mlarope_api)

install(TARGETS ${mlarope_export_targets} EXPORT mlaropeTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS mlarope RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/mlarope DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/mlarope)

set(mlarope_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/mlarope)
install(EXPORT mlaropeTargets NAMESPACE mlarope:: DESTINATION ${mlarope_cmake_dir})
export(EXPORT mlaropeTargets NAMESPACE mlarope:: FILE ${PROJECT_BINARY_DIR}/mlaropeTargets.cmake)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/mlaropeConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/mlaropeConfig.cmake
                              INSTALL_DESTINATION ${mlarope_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mlaropeConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mlaropeConfig.cmake ${PROJECT_BINARY_DIR}/mlaropeConfigVersion.cmake
        DESTINATION ${mlarope_cmake_dir})

# The package works for a project outside this tree: install into a scratch prefix, configure
# examples/consumer against it alone, build it and run it. Plain builds only: a sanitizer or
# coverage build's libraries need their runtime flags in the consumer too.
if(MLAROPE_TESTS AND NOT MLAROPE_SANITIZE AND NOT MLAROPE_COVERAGE)
  add_test(NAME package_consumer
           COMMAND ${CMAKE_COMMAND} -DBUILD=${PROJECT_BINARY_DIR} -DSOURCE=${PROJECT_SOURCE_DIR}
                   -DWORK=${PROJECT_BINARY_DIR}/package_consumer -DGENERATOR=${CMAKE_GENERATOR}
                   -DCXX=${CMAKE_CXX_COMPILER} -P ${PROJECT_SOURCE_DIR}/cmake/consumer_test.cmake)
  set_tests_properties(package_consumer PROPERTIES LABELS integration
                       PASS_REGULAR_EXPRESSION "consumer: rope gave .*: ok")
endif()
