# Decides how CUDA takes part in the build.
#   ACTKIT_WITH_CUDA        the CUDA kernels and their dispatch are linked into
#                           libactkit (needs a Torch built with CUDA)
#   ACTKIT_CUDA_CHECK_ONLY  Torch has no CUDA, but nvcc exists: every .cu file
#                           is still compiled (not linked) so CUDA code cannot
#                           rot on CPU-only build machines
include(CheckLanguage)

set(ACTKIT_WITH_CUDA OFF)
set(ACTKIT_CUDA_CHECK_ONLY OFF)

if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(_actkit_torch_has_cuda ON)
else()
  set(_actkit_torch_has_cuda OFF)
endif()

# nvcc is usually not on PATH; look where the CUDA Toolkit installs it.
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
# Hopper (H100/H200) by default; override with -DCMAKE_CUDA_ARCHITECTURES=...
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()

if(ACTKIT_CUDA STREQUAL "ON" AND NOT _actkit_torch_has_cuda)
  message(FATAL_ERROR "ACTKIT_CUDA=ON but the Torch found at ${Torch_DIR} has no CUDA")
endif()

if(_actkit_torch_has_cuda AND NOT ACTKIT_CUDA STREQUAL "OFF")
  enable_language(CUDA)
  set(ACTKIT_WITH_CUDA ON)
elseif(NOT ACTKIT_CUDA_COMPILE_CHECK STREQUAL "OFF")
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    set(ACTKIT_CUDA_CHECK_ONLY ON)
  elseif(ACTKIT_CUDA_COMPILE_CHECK STREQUAL "ON")
    message(FATAL_ERROR "ACTKIT_CUDA_COMPILE_CHECK=ON but no CUDA compiler was found")
  endif()
endif()

if(CMAKE_CUDA_COMPILER)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
endif()

message(STATUS "ACTkit: CUDA kernels linked: ${ACTKIT_WITH_CUDA}; compile-only check: ${ACTKIT_CUDA_CHECK_ONLY}")
