/* How an AMX bf16 GEMM's loop order and operand placement bound its speed: one C kernel per
 * variant of the loop `kernels_amx.AmxGemm` emits (2 x 2 tiles of 16 x 16 float32 sums, a block of
 * 32 rows x 32 columns, A row-major bf16, B in panels of 32 columns of bf16 pairs along K), each
 * timed on the same operands (best of 20 calls, 1 thread). Not part of the build; for
 * benchmarks/results/2026-11-29-resnet-amx-groups-im2col-pairs-emeraldrapids.md:
 *
 *     gcc -O2 -mamx-tile -mamx-bf16 -mavx512f benchmarks/amx_loop_orders.c -o /tmp/amx
 *     /tmp/amx M N K [first mode]          (e.g. /tmp/amx 512 1024 1024; KC=8 sets modes 14-15's K block)
 *
 * Modes: 0 the emitted loop (per panel, per row block, all of K); 1 A packed in tiles; 2 the same
 * A and B tiles every step (operands in L1: the ceiling); 3 row blocks outer, panels inner; 4-7 K
 * blocks of 4, 8, 12, 16 steps, the sums reloaded from out; 8-10 mode 0 with software prefetch of
 * A and B, A only, B only; 11 the same B tiles every step, A streaming; 12 the same A, B streaming
 * (A's rows at a power-of-two stride: L1 set conflicts); 13 both fixed, A strided; 14-15 K blocks
 * with the sums in a contiguous scratch (15: A packed); 16-18 mode 0 with B tiles contiguous,
 * B loaded non-temporally, A loaded non-temporally. Needs Linux and a CPU with AMX-BF16. */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
typedef struct { uint8_t palette, start; uint8_t res[14]; uint16_t colsb[16]; uint8_t rows[16]; } cfg_t;
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
// C[M,N] = A[M,K] B ; A bf16 row-major (lda K), or for modes 1, 3, 15 in tiles [M/16][K/32][16][32];
// B panels [N/32][K/2][32] words (mode 16: each 16-column tile contiguous). Tiles 0-3 the sums
// C[i][j], 4-5 A's row halves, 6-7 B's column tiles (tile numbers are immediates: macros).
#define ZERO4() do { _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3); } while (0)
#define LOAD4(c0, c1, ld) do { _tile_loadd(0, c0, ld); _tile_loadd(1, (c0) + 16, ld); \
    _tile_loadd(2, c1, ld); _tile_loadd(3, (c1) + 16, ld); } while (0)
#define STORE4(c0, c1, ld) do { _tile_stored(0, c0, ld); _tile_stored(1, (c0) + 16, ld); \
    _tile_stored(2, c1, ld); _tile_stored(3, (c1) + 16, ld); } while (0)
/* one K step (oneDNN's order: A0 B0 C00, B1 C01, A1 C10 C11), A and B loaded by LA and LB */
#define STEP_L(LA, LB, a0, a1, lda, b0, b1, ldb) do { \
    LA(4, a0, lda); LB(6, b0, ldb); _tile_dpbf16ps(0, 4, 6); LB(7, b1, ldb); _tile_dpbf16ps(1, 4, 7); \
    LA(5, a1, lda); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7); } while (0)
#define STEP(a0, a1, lda, b0, b1, ldb) STEP_L(_tile_loadd, _tile_loadd, a0, a1, lda, b0, b1, ldb)

static void gemm(int M, int N, int K, const uint16_t *A, const uint32_t *B, float *C, int mode) {
  int steps = K / 32, ldc = N * 4, lda = K * 2;
  static float S[4096 * 32] __attribute__((aligned(64)));  /* modes 14-15: the sums between K blocks */
  if ((mode >= 4 && mode <= 7) || mode == 14 || mode == 15) {  /* K blocks */
    int kc = mode <= 7 ? (mode - 3) * 4 : (getenv("KC") ? atoi(getenv("KC")) : 12);
    for (int p = 0; p < N / 32; p++) {
      const uint32_t *pb = B + (size_t)p * (K / 2) * 32;
      for (int k0 = 0; k0 < steps; k0 += kc) {
        int ke = k0 + kc < steps ? k0 + kc : steps, last = ke == steps;
        for (int r = 0; r < M; r += 32) {
          float *c0 = C + (size_t)r * N + p * 32, *c1 = c0 + (size_t)16 * N, *s0 = S + (size_t)r * 32;
          if (k0 == 0) ZERO4();
          else if (mode <= 7) LOAD4(c0, c1, ldc);
          else { _tile_loadd(0, s0, 64); _tile_loadd(1, s0 + 256, 64); _tile_loadd(2, s0 + 512, 64); _tile_loadd(3, s0 + 768, 64); }
          for (int s = k0; s < ke; s++) {
            const uint32_t *b0 = pb + s * 16 * 32;
            if (mode == 15) STEP(A + (size_t)r * K + s * 512, A + (size_t)(r + 16) * K + s * 512, 64, b0, b0 + 16, 128);
            else STEP(A + (size_t)r * K + s * 32, A + (size_t)(r + 16) * K + s * 32, lda, b0, b0 + 16, 128);
          }
          if (mode <= 7 || last) STORE4(c0, c1, ldc);
          else { _tile_stored(0, s0, 64); _tile_stored(1, s0 + 256, 64); _tile_stored(2, s0 + 512, 64); _tile_stored(3, s0 + 768, 64); }
        }
      }
    }
    return;
  }
  /* every other mode: all of K per block; mode 3 row blocks outer, the others panels outer */
  int blocks = (M / 32) * (N / 32);
  for (int q = 0; q < blocks; q++) {
    int p = mode == 3 ? q % (N / 32) : q / (M / 32), r = 32 * (mode == 3 ? q / (N / 32) : q % (M / 32));
    const uint32_t *pb = B + (size_t)p * (K / 2) * 32;
    const uint16_t *a0 = A + (size_t)r * K, *a1 = A + (size_t)(r + 16) * K;
    ZERO4();
    for (int s = 0; s < steps; s++) {
      const uint32_t *b0 = pb + s * 16 * 32;
      if (mode >= 8 && mode <= 10) {  /* software prefetch 2 steps ahead: A and B, A only, B only */
        if (mode != 10) for (int i = 0; i < 32; i++) _mm_prefetch((const char *)(a0 + (size_t)i * K + (s + 2) * 32), _MM_HINT_T0);
        if (mode != 9) for (int i = 0; i < 32; i++) _mm_prefetch((const char *)(b0 + 2 * 16 * 32) + i * 64, _MM_HINT_T0);
      }
      switch (mode) {
      case 1: case 3: STEP(a0 + s * 512, a1 + s * 512, 64, b0, b0 + 16, 128); break;
      case 2: STEP(A, A + 512, 64, B, B + 16, 128); break;                      /* operands in L1 */
      case 11: STEP(a0 + s * 32, a1 + s * 32, lda, B, B + 16, 128); break;      /* B fixed */
      case 12: STEP(A, A + 16 * K, lda, b0, b0 + 16, 128); break;               /* A fixed, strided */
      case 13: STEP(A, A + 16 * K, lda, B, B + 16, 128); break;                 /* both fixed */
      case 16: STEP(a0 + s * 32, a1 + s * 32, lda, b0, b0 + 256, 64); break;    /* B tiles contiguous */
      case 17: STEP_L(_tile_loadd, _tile_stream_loadd, a0 + s * 32, a1 + s * 32, lda, b0, b0 + 16, 128); break;
      case 18: STEP_L(_tile_stream_loadd, _tile_loadd, a0 + s * 32, a1 + s * 32, lda, b0, b0 + 16, 128); break;
      default: STEP(a0 + s * 32, a1 + s * 32, lda, b0, b0 + 16, 128);         /* 0, 8-10 */
      }
    }
    STORE4(C + (size_t)r * N + p * 32, C + (size_t)(r + 16) * N + p * 32, ldc);
  }
}
int main(int argc,char**argv){
  syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
  int M=atoi(argv[1]),N=atoi(argv[2]),K=atoi(argv[3]);
  uint16_t*A=aligned_alloc(64,(size_t)M*K*2); uint32_t*B=aligned_alloc(64,(size_t)K*N*2); float*C=aligned_alloc(64,(size_t)M*N*4);
  for(size_t i=0;i<(size_t)M*K;i++) A[i]=0x3f80;
  for(size_t i=0;i<(size_t)K*N/2;i++) B[i]=0x3f803f80;
  cfg_t c; memset(&c,0,sizeof c); c.palette=1; for(int t=0;t<8;t++){c.rows[t]=16;c.colsb[t]=64;} _tile_loadconfig(&c);
  for(int mode=(argc>4?atoi(argv[4]):0);mode<19;mode++){ double best=1e9;
    for(int rep=0;rep<20;rep++){double t0=now(); gemm(M,N,K,A,B,C,mode); double t=now()-t0; if(t<best)best=t;}
    printf("mode %d: %.3f ms %.0f GFLOP/s\n",mode,best*1e3,2.0*M*N*K/best*1e-9);}
  return 0;}
