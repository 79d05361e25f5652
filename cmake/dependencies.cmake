# One find_package per dependency. Every one comes from Debian 12's archive
# (scripts/install_deps.sh); a CUDA LibTorch 2.x is found the same way through Torch_DIR.
find_package(Threads REQUIRED)
find_package(Torch REQUIRED)
# OpenCV is optional: only JPEG/PNG decoding and encoding (ImageNet folders, generated JPEGs)
# needs it, in datasets/src/image_codecs.cpp. A machine without it (a GPU machine with LibTorch
# alone) builds everything else; reading JPEGs there throws ImageCodecsUnavailableError.
# GPIPE_REQUIRE_OPENCV (scripts/build.sh's Debian build) makes a missing OpenCV a configure error,
# so that the codec tests cannot skip unnoticed where OpenCV belongs.
option(GPIPE_REQUIRE_OPENCV "Fail to configure unless OpenCV is found" OFF)
find_package(OpenCV QUIET COMPONENTS core imgproc imgcodecs)
if(OpenCV_FOUND)
  set(GPIPE_WITH_OPENCV ON)
else()
  set(GPIPE_WITH_OPENCV OFF)
  if(GPIPE_REQUIRE_OPENCV)
    message(FATAL_ERROR "GPIPE_REQUIRE_OPENCV is on, but OpenCV (core, imgproc, imgcodecs) was "
                        "not found: run scripts/install_deps.sh (libopencv-dev)")
  endif()
endif()
message(STATUS "gpipe: OpenCV ${GPIPE_WITH_OPENCV}")
if(NOT GPIPE_WITH_OPENCV)
  message(STATUS "gpipe: no OpenCV: JPEG/PNG reading (ImageNet folders) will throw; install "
                 "libopencv-dev (scripts/install_deps.sh) and configure again to have it")
endif()
# IDX files (MNIST, Fashion-MNIST) may be gzipped.
find_package(ZLIB REQUIRED)
find_package(CLI11 REQUIRED)
find_package(spdlog REQUIRED)
include(spdlog_fmt)
find_package(nlohmann_json 3.9 REQUIRED)
if(GPIPE_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(GPIPE_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()

# tcmalloc: glibc malloc serialises concurrent large allocations, so CPU stages running on
# several threads do not scale without it (docs/design.md, "What this CPU demands").
# Optional: a machine without it (a GPU machine, where the CPU allocator matters little) builds
# and runs on glibc malloc.
find_library(TCMALLOC_MINIMAL_LIBRARY NAMES tcmalloc_minimal libtcmalloc_minimal.so.4)
if(NOT TCMALLOC_MINIMAL_LIBRARY)
  set(TCMALLOC_MINIMAL_LIBRARY "")
  message(STATUS "gpipe: tcmalloc_minimal not found: linking glibc malloc, which serialises "
                 "large allocations of CPU stages; install libgoogle-perftools-dev "
                 "(scripts/install_deps.sh) and configure again for multi-threaded CPU runs")
endif()

# CUDA is optional: only a CUDA LibTorch defines these targets. GPIPE_REQUIRE_CUDA (CI's 2.x
# build, scripts/gpu_check.sh) turns a LibTorch without them into a configure error.
option(GPIPE_REQUIRE_CUDA "Fail to configure unless the LibTorch found has CUDA" OFF)
if(TARGET torch_cuda OR TARGET c10_cuda)
  set(GPIPE_WITH_CUDA ON)
else()
  set(GPIPE_WITH_CUDA OFF)
  if(GPIPE_REQUIRE_CUDA)
    message(FATAL_ERROR "GPIPE_REQUIRE_CUDA is on, but the LibTorch found (${Torch_DIR}) has no "
                        "CUDA targets: point CMAKE_PREFIX_PATH at a CUDA PyTorch's "
                        "torch.utils.cmake_prefix_path")
  endif()
endif()
message(STATUS "gpipe: Torch ${Torch_VERSION}, CUDA ${GPIPE_WITH_CUDA}, tcmalloc ${TCMALLOC_MINIMAL_LIBRARY}")
