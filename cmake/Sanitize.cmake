# Sanitizers and fuzzers for the host code (scripts/sanitize.sh, scripts/fuzz.sh; docs/security.md).
#   SYMMEM_SANITIZE=address,undefined   -fsanitize=... on C/C++ (and, through -Xcompiler, on the host side of
#                                       .cu files when the CUDA host compiler is the same compiler), every
#                                       report fatal (-fno-sanitize-recover=all)
#   SYMMEM_BUILD_FUZZERS=ON             clang only: coverage for libFuzzer on the library, and the fuzz
#                                       targets linked with -fsanitize=fuzzer
# Included after the warning flags are set and before the targets are defined, so the flags reach every target.
set(SYMMEM_SANITIZE "" CACHE STRING "sanitizers for host code, e.g. address,undefined (empty: none)")
option(SYMMEM_BUILD_FUZZERS "build the libFuzzer targets (clang)" OFF)

set(SYMMEM_SAN_FLAGS "")
if(SYMMEM_SANITIZE)
  string(REPLACE "," ";" sanitizers "${SYMMEM_SANITIZE}")
  foreach(s ${sanitizers}) # one flag each: nvcc's -Xcompiler splits at commas
    list(APPEND SYMMEM_SAN_FLAGS -fsanitize=${s})
  endforeach()
  list(APPEND SYMMEM_SAN_FLAGS -fno-sanitize-recover=all -fno-omit-frame-pointer)
endif()
if(SYMMEM_BUILD_FUZZERS)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "SYMMEM_BUILD_FUZZERS needs clang (libFuzzer): configure with CC=clang CXX=clang++")
  endif()
  list(APPEND SYMMEM_SAN_FLAGS -fsanitize=fuzzer-no-link)
endif()
if(SYMMEM_SAN_FLAGS)
  string(REPLACE ";" "," SYMMEM_SAN_XFLAGS "${SYMMEM_SAN_FLAGS}")
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${SYMMEM_SAN_FLAGS}>")
  # One compiler's runtime: scripts/sanitize.sh makes clang++ the CUDA host compiler too, which also links
  # the CUDA-linked executables. clang, unlike gcc, reports the unused static inline device helpers of
  # symmem_device.cuh in every .cu that does not call them all.
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang" AND CMAKE_CUDA_HOST_COMPILER MATCHES "clang")
    add_compile_options("$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${SYMMEM_SAN_XFLAGS}>")
    string(APPEND SYMMEM_CUDA_HOST_WARNINGS ",-Wno-unused-function")
  endif()
  add_link_options("$<$<LINK_LANGUAGE:C,CXX,CUDA>:${SYMMEM_SAN_FLAGS}>")
  # The sanitizer runtimes live in the executables, so the shared library cannot be linked with
  # --no-undefined: drop it from libsymmem.so in these builds (deferred until the target exists).
  function(symmem_sanitize_shared_lib)
    get_target_property(opts symmem LINK_OPTIONS)
    list(REMOVE_ITEM opts -Wl,--no-undefined)
    set_target_properties(symmem PROPERTIES LINK_OPTIONS "${opts}")
  endfunction()
  cmake_language(DEFER CALL symmem_sanitize_shared_lib)
endif()
