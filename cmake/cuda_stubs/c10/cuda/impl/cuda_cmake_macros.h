// Stub for the CUDA parse check (cmake/cuda_check.cmake): the header a CUDA build of LibTorch
// generates at configure time.
#pragma once
#define C10_CUDA_BUILD_SHARED_LIBS
