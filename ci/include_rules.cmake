# SPDX-License-Identifier: Apache-2.0
# The include rules of docs/architecture.md, checked over the source tree (a CTest test).
#
#   cmake -DROOT=<repository> -P ci/include_rules.cmake     check the tree; lists each violation
#   cmake -DSELF_TEST=ON -DWORK=<dir> -P ci/include_rules.cmake
#       write a small tree with one violation of each kind into WORK and fail unless every one
#       of them, and nothing else, is reported (the check can fail)
#
# A production source of a folder below may include, with quotes, only headers under the
# folders listed for it ("kernels/..." is cuda/kernels, "io/..." is harness/io, "fuzz/..." is
# fuzz/), the public API
# ("mlarope/..."), and other top-level modules' headers (a name without a folder, such as
# "reference.h"), except in cuda/kernels, which sees only itself, the two plain-type headers of
# the API and a few standard headers. Tests (*_test.cpp, *_util.h, cuda/tests, cuda/test_support)
# may include anything; nothing else may include cuda/test_support.
cmake_minimum_required(VERSION 3.24)

# folder -> the folders (first path component of a quoted include) its sources may include.
set(rule_cuda/kernels "kernels")
set(rule_cuda/launch "kernels;launch")
set(rule_cuda/host "kernels;launch;host")
set(rule_cuda/device "kernels;launch;device")
set(rule_cuda "kernels;launch;host;device")
set(rule_harness/io "io")
set(rule_harness/backends "io;backends")
set(rule_harness/checks "io;backends;checks")
set(rule_fuzz "io;backends;checks;fuzz")
set(rule_cli "io;backends;checks;fuzz;cli")
set(checked_folders cuda/kernels cuda/launch cuda/host cuda/device cuda harness/io
                    harness/backends harness/checks fuzz cli)
# Sources built only into test binaries (they link the faulty kernel build of cuda/test_support).
set(test_only_files fuzz/broken_kernels.h fuzz/broken_kernels.cpp)
# What a kernel header may include besides cuda/kernels: plain types of the API, and standard
# headers that compile for the device (emmintrin.h only under a host-compiler guard).
set(kernel_api_headers "mlarope/types.h;mlarope/status.h")
set(kernel_system_headers "cstdint;cstring;cstddef;cmath;type_traits;limits;emmintrin.h")

# Append to ${out} one line per include of `file` (in `folder`) that breaks the rules.
function(check_file root folder file out)
  set(found "${${out}}")
  string(JOIN ", " api_text ${kernel_api_headers})
  string(JOIN ", " system_text ${kernel_system_headers})
  string(JOIN "/, " allowed_text ${rule_${folder}})
  file(STRINGS "${root}/${folder}/${file}" lines REGEX "^[ \t]*#[ \t]*include")
  foreach(line IN LISTS lines)
    set(bad "")
    if(line MATCHES "#[ \t]*include[ \t]*\"([^\"]+)\"")
      set(name "${CMAKE_MATCH_1}")
      if(name MATCHES "^([^/]+)/")
        set(prefix "${CMAKE_MATCH_1}")
        if(folder STREQUAL "cuda/kernels")
          if(NOT prefix STREQUAL "kernels" AND NOT name IN_LIST kernel_api_headers)
            set(bad "a kernel header sees only cuda/kernels/ and ${api_text}")
          endif()
        elseif(NOT prefix STREQUAL "mlarope" AND NOT prefix IN_LIST rule_${folder})
          set(bad "${folder} may include only ${allowed_text}/, mlarope/ and other modules")
        endif()
      elseif(folder STREQUAL "cuda/kernels")
        set(bad "a kernel header includes no other module")
      endif()
    elseif(line MATCHES "#[ \t]*include[ \t]*<([^>]+)>" AND folder STREQUAL "cuda/kernels")
      if(NOT CMAKE_MATCH_1 IN_LIST kernel_system_headers)
        set(bad "a kernel header includes only ${system_text} of the system headers")
      endif()
    endif()
    if(bad)
      string(STRIP "${line}" line)
      list(APPEND found "${folder}/${file}: ${line}: ${bad}")
    endif()
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

# Every violation under `root`, into ${out}.
function(check_tree root out)
  set(found "")
  foreach(folder IN LISTS checked_folders)
    file(GLOB files RELATIVE "${root}/${folder}" "${root}/${folder}/*.h" "${root}/${folder}/*.cpp"
         "${root}/${folder}/*.cu" "${root}/${folder}/*.cuh")
    foreach(file IN LISTS files)
      if(file MATCHES "_test\\.cpp$" OR file MATCHES "_util\\.h$" OR "${folder}/${file}" IN_LIST test_only_files)
        continue()
      endif()
      check_file("${root}" "${folder}" "${file}" found)
    endforeach()
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

if(SELF_TEST)
  # One violation of each kind, and includes that are fine.
  set(fixture "${WORK}/include_rules_fixture")
  file(REMOVE_RECURSE "${fixture}")
  file(WRITE "${fixture}/cuda/kernels/sees_host.h" "#include \"host/host_stream.h\"\n")
  file(WRITE "${fixture}/cuda/kernels/sees_vector.h" "#include <vector>\n")
  file(WRITE "${fixture}/cuda/kernels/sees_reference.h" "#include \"reference.h\"\n")
  file(WRITE "${fixture}/cuda/kernels/sees_api.h" "#include \"mlarope/backend.h\"\n")
  file(WRITE "${fixture}/cuda/host/sees_testing.cpp" "#include \"test_support/faulty_host_stream.h\"\n")
  file(WRITE "${fixture}/cuda/launch/sees_host.h" "#include \"host/host_kernels.h\"\n")
  file(WRITE "${fixture}/cuda/device/sees_host.cpp" "#include \"host/host_stream.h\"\n")
  file(WRITE "${fixture}/harness/checks/sees_fuzz.cpp" "  #  include \"fuzz/fuzz.h\"\n")
  file(WRITE "${fixture}/cuda/kernels/fine.h"
       "#include <cstdint>\n#include \"kernels/grid.h\"\n#include \"mlarope/types.h\"\n")
  file(WRITE "${fixture}/cuda/fine.cpp" "#include \"host/host_stream.h\"\n#include <vector>\n")
  file(WRITE "${fixture}/harness/checks/fine_test.cpp" "#include \"cli/anything.h\"\n")
  file(WRITE "${fixture}/fuzz/sees_cli.cpp" "#include \"cli/commands.h\"\n")
  file(WRITE "${fixture}/fuzz/fine.cpp"
       "#include \"checks/checks.h\"\n#include \"fuzz/generators.h\"\n")
  file(WRITE "${fixture}/cli/fine.cpp" "#include \"fuzz/fuzz.h\"\n#include \"checks/checks.h\"\n")
  check_tree("${fixture}" found)
  set(expected cuda/kernels/sees_host.h cuda/kernels/sees_vector.h cuda/kernels/sees_reference.h
               cuda/kernels/sees_api.h cuda/host/sees_testing.cpp cuda/launch/sees_host.h
               cuda/device/sees_host.cpp harness/checks/sees_fuzz.cpp fuzz/sees_cli.cpp)
  list(LENGTH found reported)
  list(LENGTH expected wanted)
  foreach(file IN LISTS expected)
    if(NOT found MATCHES "${file}:")
      message(FATAL_ERROR "include rules: the violation in ${file} was not reported")
    endif()
  endforeach()
  if(NOT reported EQUAL wanted)
    string(REPLACE ";" "\n  " found "${found}")
    message(FATAL_ERROR "include rules: expected ${wanted} violations, got ${reported}:\n  ${found}")
  endif()
  message(STATUS "include rules: all ${wanted} planted violations reported, nothing else")
  return()
endif()

if(NOT ROOT)
  message(FATAL_ERROR "usage: cmake -DROOT=<repository> -P ci/include_rules.cmake")
endif()
check_tree("${ROOT}" found)
if(found)
  list(LENGTH found count)
  string(REPLACE ";" "\n  " found "${found}")
  message(FATAL_ERROR "include rules (docs/architecture.md): ${count} violation(s)\n  ${found}")
endif()
message(STATUS "include rules: every production source of cuda/, harness/, fuzz/ and cli/ keeps them")
