# One find_package per dependency. Every one comes from Debian 12's archive
# (scripts/install_deps.sh); a CUDA LibTorch 2.x is found the same way through Torch_DIR.
find_package(Threads REQUIRED)
find_package(Torch REQUIRED)
if(NOT GPIPE_CORE_ONLY)
  find_package(OpenCV REQUIRED COMPONENTS core imgproc imgcodecs)
  find_package(ZLIB REQUIRED)
endif()
find_package(CLI11 REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3.9 REQUIRED)
if(GPIPE_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(GPIPE_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()

# tcmalloc: glibc malloc serialises concurrent large allocations, so CPU stages running on
# several threads do not scale without it (docs/design.md, "What this CPU demands").
# A core-only build (a GPU machine: the CPU allocator matters little there) goes without.
find_library(TCMALLOC_MINIMAL_LIBRARY NAMES tcmalloc_minimal libtcmalloc_minimal.so.4)
if(NOT TCMALLOC_MINIMAL_LIBRARY AND GPIPE_CORE_ONLY)
  set(TCMALLOC_MINIMAL_LIBRARY "")
elseif(NOT TCMALLOC_MINIMAL_LIBRARY)
  message(FATAL_ERROR "tcmalloc_minimal not found: run scripts/install_deps.sh "
                      "(Debian package libgoogle-perftools-dev)")
endif()

# CUDA is optional: only a CUDA LibTorch defines these targets.
if(TARGET torch_cuda OR TARGET c10_cuda)
  set(GPIPE_WITH_CUDA ON)
else()
  set(GPIPE_WITH_CUDA OFF)
endif()
message(STATUS "gpipe: Torch ${Torch_VERSION}, CUDA ${GPIPE_WITH_CUDA}, tcmalloc ${TCMALLOC_MINIMAL_LIBRARY}")
