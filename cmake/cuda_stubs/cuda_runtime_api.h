// Stub for the CUDA parse check (cmake/cuda_check.cmake), never used in a real CUDA build:
// declarations only, just enough of the CUDA runtime API for LibTorch's c10/cuda headers to
// parse, so that a CPU-only machine compiles the code guarded by GPIPE_WITH_CUDA. Nothing built
// with these is linked.
#pragma once

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
enum cudaError { cudaSuccess = 0, cudaErrorNotReady = 600 };
typedef enum cudaError cudaError_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};

extern "C" {
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest);
cudaError_t cudaGetLastError(void);
const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamGetPriority(cudaStream_t stream, int* priority);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, unsigned long count, cudaMemcpyKind kind,
                            cudaStream_t stream);
}
