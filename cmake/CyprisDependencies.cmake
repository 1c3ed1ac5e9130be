# Every third-party dependency comes from the distribution's packages and is found here.
# Nothing is vendored and nothing is downloaded at build time.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(CURL REQUIRED)
find_package(OpenSSL REQUIRED)
find_package(yaml-cpp REQUIRED)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

# OpenBLAS: Debian ships a CMake config for the generic BLAS; use the openblas pkg-config.
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)

# CUDA: AUTO enables it when nvcc is found; ON requires it.
set(CYPRIS_HAVE_CUDA OFF)
if(NOT CYPRIS_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS "/usr/local/cuda/bin/nvcc")
    set(CMAKE_CUDA_COMPILER "/usr/local/cuda/bin/nvcc")
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_ARCHITECTURES "${CYPRIS_CUDA_ARCHS}")
    # CMake 3.25 would carry CXX_STANDARD 20 over to .cu files but knows no C++20 flag for
    # nvcc 13; the kernels need only C++17.
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    find_library(NCCL_LIBRARY NAMES nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu)
    find_path(NCCL_INCLUDE_DIR NAMES nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include)
    if(NCCL_LIBRARY AND NCCL_INCLUDE_DIR)
      set(CYPRIS_HAVE_CUDA ON)
    elseif(CYPRIS_CUDA STREQUAL "ON")
      message(FATAL_ERROR "CYPRIS_CUDA=ON but NCCL (nccl.h, libnccl) was not found")
    else()
      message(WARNING "nvcc found but NCCL is missing: building without the CUDA backend")
    endif()
  elseif(CYPRIS_CUDA STREQUAL "ON")
    message(FATAL_ERROR "CYPRIS_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()

# Several processes over MPI (`--distributed-executor-backend mpi`, docs/distributed.md): Open MPI
# from Debian (libopenmpi-dev, openmpi-bin). Optional: without it the build refuses that backend at
# start-up and everything else is unchanged.
set(CYPRIS_MPI "AUTO" CACHE STRING "Build MPI support for multi-process runs: AUTO (when found), ON or OFF")
set_property(CACHE CYPRIS_MPI PROPERTY STRINGS AUTO ON OFF)
set(CYPRIS_HAVE_MPI OFF)
if(NOT CYPRIS_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND)
    set(CYPRIS_HAVE_MPI ON)
    find_program(CYPRIS_MPIEXEC NAMES mpirun mpiexec)
  elseif(CYPRIS_MPI STREQUAL "ON")
    message(FATAL_ERROR "CYPRIS_MPI=ON but MPI was not found (install libopenmpi-dev openmpi-bin)")
  endif()
endif()

# Desktop UI: GLFW + OpenGL + Dear ImGui (libimgui-dev, whose GLFW/OpenGL3 backend sources
# ship in /usr/share/doc/libimgui-dev/examples/backends).
set(CYPRIS_HAVE_UI OFF)
if(NOT CYPRIS_UI STREQUAL "OFF")
  find_package(glfw3 3.3 QUIET)
  find_package(OpenGL QUIET)
  pkg_check_modules(IMGUI QUIET IMPORTED_TARGET imgui)
  find_path(IMGUI_BACKENDS_DIR NAMES imgui_impl_glfw.cpp imgui_impl_opengl3.cpp
            PATHS /usr/share/doc/libimgui-dev/examples/backends NO_DEFAULT_PATH)
  if(glfw3_FOUND AND OpenGL_FOUND AND IMGUI_FOUND AND IMGUI_BACKENDS_DIR)
    set(CYPRIS_HAVE_UI ON)
  elseif(CYPRIS_UI STREQUAL "ON")
    message(FATAL_ERROR "CYPRIS_UI=ON but GLFW, OpenGL or Dear ImGui (libimgui-dev) is missing")
  endif()
endif()

if(CYPRIS_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
