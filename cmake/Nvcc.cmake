# The CUDA compiler, then enable_language(CUDA). A source build needs the CUDA toolkit (12.2 or newer) for
# nvcc; what it builds needs only the NVIDIA driver. CMake by itself looks at CUDACXX and PATH only, and
# when both miss it says "Failed to find nvcc ... set the CUDAToolkit_ROOT variable", which tells a pip user
# nothing: a toolkit installed where toolkits go (CUDA_HOME, /usr/local/cuda) is not on PATH in most
# Python environments. So nvcc is looked for there too, and a miss says what to install, in symmem's words.
set(_symmem_cuda_help
  "Install the CUDA toolkit 12.2 or newer (https://developer.nvidia.com/cuda-downloads, or your "
  "distribution's cuda-toolkit package) and put its bin/ on PATH, set CUDA_HOME to its folder, or set CUDACXX "
  "to its nvcc (e.g. CUDACXX=/usr/local/cuda/bin/nvcc pip install .). To use symmem without a toolkit, "
  "install the binary wheel instead (docs/install.md): it needs only the NVIDIA driver.")
string(REPLACE ";" "" _symmem_cuda_help "${_symmem_cuda_help}")

if(NOT CMAKE_CUDA_COMPILER)
  if(NOT "$ENV{CUDACXX}" STREQUAL "")
    find_program(_symmem_nvcc NAMES "$ENV{CUDACXX}" NO_CACHE)
    if(NOT _symmem_nvcc)
      message(FATAL_ERROR "symmem: CUDACXX is set to '$ENV{CUDACXX}', which is not an executable. Point it at the "
        "nvcc of a CUDA toolkit 12.2 or newer, or unset it. ${_symmem_cuda_help}")
    endif()
  else()
    # CUDA_HOME (PyTorch's variable), CUDA_PATH, CUDAToolkit_ROOT before PATH; the usual install folders after.
    find_program(_symmem_nvcc nvcc HINTS ${CUDAToolkit_ROOT} ENV CUDAToolkit_ROOT ENV CUDA_HOME ENV CUDA_PATH
      PATH_SUFFIXES bin PATHS /usr/local/cuda /opt/cuda NO_CACHE)
    if(NOT _symmem_nvcc)
      message(FATAL_ERROR "symmem: building from source needs the CUDA compiler (nvcc), which is not on PATH, in "
        "CUDA_HOME or in /usr/local/cuda, and CUDACXX is not set. ${_symmem_cuda_help}")
    endif()
  endif()
  # A wrapper or link left behind by a removed toolkit is found but does not run: say so, not CMake's
  # "Couldn't find CUDA library root".
  execute_process(COMMAND "${_symmem_nvcc}" --version RESULT_VARIABLE _symmem_nvcc_rc OUTPUT_QUIET
    ERROR_VARIABLE _symmem_nvcc_err)
  if(NOT _symmem_nvcc_rc EQUAL 0)
    string(STRIP "${_symmem_nvcc_err}" _symmem_nvcc_err)
    message(FATAL_ERROR "symmem: ${_symmem_nvcc} does not run (${_symmem_nvcc_rc}: ${_symmem_nvcc_err}). "
      "${_symmem_cuda_help}")
  endif()
  set(CMAKE_CUDA_COMPILER "${_symmem_nvcc}")
endif()
enable_language(CUDA)
if(CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA" AND CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.2)
  message(FATAL_ERROR "symmem: ${CMAKE_CUDA_COMPILER} is CUDA ${CMAKE_CUDA_COMPILER_VERSION}; symmem needs 12.2 or "
    "newer. ${_symmem_cuda_help}")
endif()
