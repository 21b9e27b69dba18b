// Does a warm cuBLAS GEMM of the 16-process test's shape (16x1024 @ 1024x1024 bf16) run beside another MPS
// client's kernel that holds B blocks of 512 threads with ~120 registers each (one per SM, like symmem's data
// kernels)?   ./gemm_probe spin SECONDS BLOCKS THREADS   |   ./gemm_probe gemm LABEL DELAY_S
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

__device__ unsigned long long gtime() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
// Live values keep the registers of a data kernel (symmem's use up to 122).
__global__ void __launch_bounds__(512, 1) spin_heavy(unsigned long long ns, float *sink) {
  float r[100];
#pragma unroll
  for (int i = 0; i < 100; i++) r[i] = threadIdx.x * (i + 1);
  unsigned long long t0 = gtime();
  int it = 0;
  while (gtime() - t0 < ns) {
#pragma unroll
    for (int i = 0; i < 100; i++) r[i] = r[i] * 1.0001f + r[(i + 1) % 100];
    it++;
  }
  float s = 0;
#pragma unroll
  for (int i = 0; i < 100; i++) s += r[i];
  if (s == 1234.5f && it == 7) sink[0] = s;
}
static double now_us() { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int main(int argc, char **argv) {
  if (argc >= 5 && !strcmp(argv[1], "spin")) {
    cudaFree(0);
    double s = atof(argv[2]); int blocks = atoi(argv[3]), threads = atoi(argv[4]);
    cudaFuncAttributes fa; cudaFuncGetAttributes(&fa, spin_heavy);
    int per_sm = 0; cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, spin_heavy, threads, 0);
    printf("spinner: %d blocks x %d threads, %d regs/thread, %d per SM, %.1f s\n", blocks, threads, fa.numRegs, per_sm, s);
    fflush(stdout);
    float *sink; cudaMalloc(&sink, 4);
    spin_heavy<<<blocks, threads>>>((unsigned long long)(s * 1e9), sink);
    cudaError_t e = cudaDeviceSynchronize();
    printf("spinner: done %s\n", cudaGetErrorString(e));
    return 0;
  }
  const char *label = argv[2];
  double delay = atof(argv[3]);
  cublasHandle_t h; cublasCreate(&h);
  const int M = 16, N = 1024, K = 1024; __nv_bfloat16 *A, *B, *C; float one = 1.f, zero = 0.f;
  cudaMalloc(&A, 2 * M * K); cudaMalloc(&B, 2 * K * N); cudaMalloc(&C, 2 * M * N);
#define GEMM cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, CUDA_R_16BF, N, A, CUDA_R_16BF, K, &zero, C, CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
  for (int i = 0; i < 3; i++) GEMM;
  cudaDeviceSynchronize();
  double t0 = now_us(); GEMM; cudaDeviceSynchronize();
  printf("%-12s GEMM alone %10.1f us\n", label, now_us() - t0);
  usleep((useconds_t)(delay * 1e6));
  t0 = now_us(); GEMM; cudaError_t e = cudaDeviceSynchronize();
  printf("%-12s GEMM beside the spinner %10.1f us %s\n", label, now_us() - t0, e ? cudaGetErrorString(e) : "");
  return 0;
}
