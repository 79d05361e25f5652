# The CUDA parse check: a CPU-only build compiles, but never links, every source of the project
# that holds code guarded by GPIPE_WITH_CUDA, with the guard on. LibTorch's CPU packages ship
# the c10/cuda and ATen/cuda headers; the few CUDA toolkit headers they include come from
# cmake/cuda_stubs (declarations only). So a typo or an API that LibTorch 1.13 lacks in CUDA-only
# code fails the CPU build instead of the first GPU session. A CUDA build (GPIPE_WITH_CUDA on)
# compiles that code for real and skips this.
option(GPIPE_CUDA_PARSE_CHECK "Compile the CUDA-only code of a CPU build against stub headers" ON)
if(GPIPE_WITH_CUDA OR NOT GPIPE_CUDA_PARSE_CHECK)
  return()
endif()

# Every library source that holds guarded code, found again at each configure.
file(GLOB gpipe_library_sources CONFIGURE_DEPENDS
     ${CMAKE_SOURCE_DIR}/core/src/*.cpp ${CMAKE_SOURCE_DIR}/models/src/*.cpp
     ${CMAKE_SOURCE_DIR}/datasets/src/*.cpp)
set(gpipe_cuda_sources "")
foreach(source IN LISTS gpipe_library_sources)
  file(STRINGS ${source} guarded REGEX "GPIPE_WITH_CUDA" LIMIT_COUNT 1)
  if(guarded)
    list(APPEND gpipe_cuda_sources ${source})
  endif()
endforeach()

add_library(gpipe_cuda_parse_check OBJECT ${gpipe_cuda_sources})
gpipe_target_defaults(gpipe_cuda_parse_check)
target_compile_definitions(gpipe_cuda_parse_check PRIVATE GPIPE_WITH_CUDA=1)
target_include_directories(gpipe_cuda_parse_check SYSTEM PRIVATE
                           ${CMAKE_SOURCE_DIR}/cmake/cuda_stubs)
# The libraries' include folders, definitions and dependencies; nothing is linked.
target_link_libraries(gpipe_cuda_parse_check PRIVATE gpipe_core gpipe_models gpipe_datasets)
list(LENGTH gpipe_cuda_sources count)
message(STATUS "gpipe: CUDA parse check over ${count} source(s) with guarded code")
