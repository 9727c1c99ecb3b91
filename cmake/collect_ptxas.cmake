# SPDX-License-Identifier: Apache-2.0
# After mlarope_cuda is built: every OBJECT.ptxas.txt under DIR (cmake/ptxas_log.sh wrote them)
# into OUT, one file with every kernel's ptxas -v lines (`mlarope report` shows it as a table).
file(GLOB_RECURSE parts "${DIR}/*.ptxas.txt")
list(SORT parts)
set(text "")
foreach(part IN LISTS parts)
  file(READ "${part}" lines)
  string(APPEND text "${lines}")
endforeach()
file(WRITE "${OUT}" "${text}")
