// Stub for the CUDA parse check (cmake/cuda_check.cmake); see cuda_runtime_api.h.
#pragma once
#include "cuda_runtime_api.h"
