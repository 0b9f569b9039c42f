# Precompiled <torch/torch.h>, shared between targets.
#
# One precompiled LibTorch header is about 600 MB on disk and a minute of
# compile, so the build makes as few as it can: GCC accepts a PCH only from a
# compile with the same position-independence flag, hence one for the
# libraries (-fPIC) and one for the programs (-fPIE). The first target of each
# kind builds it; the others reuse it. GCC also refuses a PCH (warning
# -Winvalid-pch, then compiles without it) in a file that lacks a macro the
# PCH was built with: so the first target of each kind must carry no
# definitions of its own beyond what every later one has.
#
# actkit_torch_pch(<target>): gives <target> the shared PCH of its kind.
# Does nothing when ACTKIT_PCH is OFF. Headers a target adds beyond
# <torch/torch.h> are parsed per file, as without PCH.
function(actkit_torch_pch target)
  if(NOT ACTKIT_PCH)
    return()
  endif()
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "EXECUTABLE")
    set(kind programs)
  else()
    set(kind libraries)
  endif()
  get_property(owner GLOBAL PROPERTY ACTKIT_TORCH_PCH_${kind})
  if(owner)
    target_precompile_headers(${target} REUSE_FROM ${owner})
  else()
    # CXX only: the library also holds CUDA sources when the kernels are built.
    target_precompile_headers(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:<torch/torch.h$<ANGLE-R>>)
    set_property(GLOBAL PROPERTY ACTKIT_TORCH_PCH_${kind} ${target})
  endif()
endfunction()
