# One precompiled <torch/torch.h>, shared by every target that includes
# LibTorch.
#
# A precompiled LibTorch header is about 600 MB on disk and over a minute of
# compile, so the build makes exactly one. GCC accepts a PCH only from a
# compile with the same position-independence flag, so every target that
# uses it compiles as position-independent code (-fPIC): the libraries
# already do, and the programs do too (-fPIC objects link into a PIE). The
# first target to ask builds it; the others reuse it. GCC also refuses a PCH
# (warning -Winvalid-pch, then compiles without it) in a file that defines a
# macro the PCH's headers test differently: so the first target must carry
# no definitions of its own that LibTorch's headers look at.
#
# actkit_torch_pch(<target>): gives <target> the shared PCH. Does nothing
# when ACTKIT_PCH is OFF. Headers a target adds beyond <torch/torch.h> are
# parsed per file, as without PCH.
function(actkit_torch_pch target)
  if(NOT ACTKIT_PCH)
    return()
  endif()
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "EXECUTABLE")
    # -fPIC where CMake would pass -fPIE, so that the PCH fits.
    set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fPIC>)
  endif()
  get_property(owner GLOBAL PROPERTY ACTKIT_TORCH_PCH_OWNER)
  if(owner)
    target_precompile_headers(${target} REUSE_FROM ${owner})
  else()
    # CXX only: the library also holds CUDA sources when the kernels are built.
    target_precompile_headers(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:<torch/torch.h$<ANGLE-R>>)
    set_property(GLOBAL PROPERTY ACTKIT_TORCH_PCH_OWNER ${target})
  endif()
endfunction()
