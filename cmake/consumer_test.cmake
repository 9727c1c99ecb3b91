# SPDX-License-Identifier: Apache-2.0
# cmake -DBUILD=... -DSOURCE=... -DWORK=... -DGENERATOR=... -DCXX=... -P consumer_test.cmake
# Installs BUILD into WORK/prefix, then configures, builds and runs SOURCE/examples/consumer
# with that prefix as the only place to find mlarope, and fails unless the package found is
# the installed one.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "consumer test: '${ARGN}' failed (${status}):\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK}")
run(${CMAKE_COMMAND} --install "${BUILD}" --prefix "${WORK}/prefix")
run(${CMAKE_COMMAND} -S "${SOURCE}/examples/consumer" -B "${WORK}/build" -G "${GENERATOR}"
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${WORK}/prefix
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)
file(STRINGS "${WORK}/build/CMakeCache.txt" found REGEX "^mlarope_DIR:")
if(NOT found MATCHES "${WORK}/prefix/")
  message(FATAL_ERROR "consumer test: the package was not found in the installed prefix: ${found}")
endif()
run(${CMAKE_COMMAND} --build "${WORK}/build")
run("${WORK}/build/consumer")
message("${last_output}")
