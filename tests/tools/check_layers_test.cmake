# ctest layer_check_refuses_bad_includes: cmake/check_layers.cmake, run on a small made-up tree,
# passes the includes the rules allow and refuses, naming file, header and what is allowed: an
# include upward, one sideways, one into app/ or tests/ from below, one past app/'s front door, one
# that a layer with a front door would reach only through a layer under its deps, a file or log
# header in a pure layer, and a GPU kernel outside the kernels layer or in its headers.
# Run as: cmake -DCHECK=<cmake/check_layers.cmake> -DWORK=<scratch folder> -P check_layers_test.cmake
cmake_minimum_required(VERSION 3.24)
file(REMOVE_RECURSE "${WORK}")

function(put path)
  set(text "")
  foreach(inc ${ARGN})
    if(inc MATCHES "^<")
      string(APPEND text "#include ${inc}\n")
    elseif(inc MATCHES "^//")
      string(APPEND text "${inc}\n")  # a line of code
    else()
      string(APPEND text "#include \"${inc}\"\n")
    endif()
  endforeach()
  file(WRITE "${WORK}/${path}" "// made up\n#include <vector>\n${text}")
endfunction()

set(records
    "low|eng/low||||pure"
    "gpu|eng/gpu|low|||kernels"
    "mid|eng/mid|low"
    "side|eng/side|low"
    "top|eng/top|mid,side"
    "app|app|top|eng/mid/door.h|app/tool.cpp>eng/mid/inner.h"
    "tests|tests|*")
string(JOIN "\n" layers ${records})
file(WRITE "${WORK}/layers.txt" "${layers}\n")

function(run_check out_ok out_text)
  execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${WORK} -DLAYERS=${WORK}/layers.txt -P ${CHECK}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE e)
  if(rc EQUAL 0)
    set(${out_ok} TRUE PARENT_SCOPE)
  else()
    set(${out_ok} FALSE PARENT_SCOPE)
  endif()
  string(REGEX REPLACE "[ \n]+" " " text "${o}${e}")
  set(${out_text} "${text}" PARENT_SCOPE)
endfunction()

# Everything the rules allow.
put(eng/low/a.h <vector> <memory>)
put(eng/gpu/k.h eng/low/a.h "// void launch_k(float* x, cudaStream_t s);")
put(eng/gpu/k.cu eng/gpu/k.h "// static __global__ void k(float* x) {} void launch_k(float* x) { k<<<1, 1>>>(x); }")
put(eng/mid/door.h eng/low/a.h)
put(eng/mid/inner.h)
put(eng/side/s.cpp eng/low/a.h)
put(eng/top/t.cpp eng/mid/door.h eng/side/s.h eng/low/a.h)
put(app/ok.cpp eng/top/t.h eng/mid/door.h app/other.h)
put(app/tool.cpp eng/mid/inner.h)
put(tests/x_test.cpp app/ok.h eng/low/a.h tests/support/h.h gtest/gtest.h)
run_check(ok text)
if(NOT ok)
  message(FATAL_ERROR "the check refused a tree that keeps the rules: ${text}")
endif()

# Each kind of bad include, one file each.
put(eng/low/up.h eng/mid/door.h)
put(eng/mid/sideways.cpp eng/side/s.h)
put(eng/top/into_app.cpp app/ok.h)
put(eng/low/into_tests.cpp tests/support/h.h)
put(app/past_door.cpp eng/mid/inner.h)
put(app/under_deps.cpp eng/low/a.h)
put(app/into_tests.cpp tests/support/h.h)
put(eng/low/reads_files.cpp <fstream>)
put(eng/low/logs.cpp engine/common/log.h)
put(eng/mid/kernel.cu "// __global__ void k() {}")
put(eng/mid/launch.cpp "// k<<<1, 1>>>();")
put(eng/gpu/kernel_in_header.h "// __global__ void k();")
run_check(ok text)
if(ok)
  message(FATAL_ERROR "the check passed a tree with bad includes")
endif()
foreach(want
    "eng/low/up.h (layer low) includes eng/mid/door.h (layer mid) -- low may include: low"
    "eng/mid/sideways.cpp (layer mid) includes eng/side/s.h (layer side)"
    "eng/top/into_app.cpp (layer top) includes app/ok.h (layer app)"
    "eng/low/into_tests.cpp (layer low) includes tests/support/h.h (layer tests)"
    "app/past_door.cpp (layer app) includes eng/mid/inner.h (layer mid) -- app may include: app, top, and of other layers only: eng/mid/door.h"
    "app/under_deps.cpp (layer app) includes eng/low/a.h (layer low)"
    "app/into_tests.cpp (layer app) includes tests/support/h.h (layer tests)"
    "eng/low/reads_files.cpp (layer low) has #include <fstream>: low is plain logic"
    "eng/low/logs.cpp (layer low) has #include \"engine/common/log.h\": low is plain logic"
    "eng/mid/kernel.cu (layer mid) defines or launches a GPU kernel"
    "eng/mid/launch.cpp (layer mid) defines or launches a GPU kernel"
    "eng/gpu/kernel_in_header.h (layer gpu) declares a __global__ kernel")
  string(FIND "${text}" "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the check's report lacks \"${want}\":\n${text}")
  endif()
endforeach()
string(REGEX REPLACE "includes [^ ]+ \\(layer" "" refused_files "${text}")  # what each refused file includes
foreach(good eng/low/a.h eng/gpu/k.h eng/gpu/k.cu eng/top/t.cpp app/ok.cpp app/tool.cpp tests/x_test.cpp)
  string(FIND "${refused_files}" "${good} (layer" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "the check refused ${good}, which keeps the rules:\n${text}")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK}")
