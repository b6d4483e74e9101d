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
// C[M,N] += A[M,K] B ; A bf16 row-major lda=K ; B panels [N/32][K/2][32] words
static void gemm(int M,int N,int K, const uint16_t*A, const uint32_t*B, float*C, int mode){
  int steps=K/32;
  if(mode>=16){ // mode 0, 16: B tiles contiguous (stride 64); 17: B loads tileloaddt1; 18: A loads t1
  for(int p=0;p<N/32;p++) for(int r=0;r<M;r+=32){
    _tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);
    const uint32_t*pb=B+(size_t)p*(K/2)*32;
    for(int s=0;s<steps;s++){
      if(mode==18) _tile_stream_loadd(4, A+(size_t)r*K+s*32, K*2); else _tile_loadd(4, A+(size_t)r*K+s*32, K*2);
      if(mode==16){_tile_loadd(6, pb+s*16*32, 64);} else if(mode==17){_tile_stream_loadd(6, pb+s*16*32, 128);} else _tile_loadd(6, pb+s*16*32, 128);
      _tile_dpbf16ps(0,4,6);
      if(mode==16){_tile_loadd(7, pb+s*16*32+256, 64);} else if(mode==17){_tile_stream_loadd(7, pb+s*16*32+16, 128);} else _tile_loadd(7, pb+s*16*32+16, 128);
      _tile_dpbf16ps(1,4,7);
      if(mode==18) _tile_stream_loadd(5, A+(size_t)(r+16)*K+s*32, K*2); else _tile_loadd(5, A+(size_t)(r+16)*K+s*32, K*2);
      _tile_dpbf16ps(2,5,6);
      _tile_dpbf16ps(3,5,7);
    }
    _tile_stored(0, C+(size_t)r*N+p*32, N*4);_tile_stored(1, C+(size_t)r*N+p*32+16, N*4);
    _tile_stored(2, C+(size_t)(r+16)*N+p*32, N*4);_tile_stored(3, C+(size_t)(r+16)*N+p*32+16, N*4);
  } return;}
  if(mode>=14){ // K-blocked, C partials in a contiguous scratch; 15: and A packed in tiles (as mode 1)
  static float S[4096*32] __attribute__((aligned(64)));
  int kc = getenv("KC")?atoi(getenv("KC")):12;
  for(int p=0;p<N/32;p++){ const uint32_t*pb=B+(size_t)p*(K/2)*32;
   for(int k0=0;k0<steps;k0+=kc){ int ke = k0+kc<steps?k0+kc:steps; int last = ke==steps;
    for(int r=0;r<M;r+=32){
    float*s0=S+(size_t)r*32;
    if(k0==0){_tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);}
    else {_tile_loadd(0,s0,64);_tile_loadd(1,s0+256,64);_tile_loadd(2,s0+512,64);_tile_loadd(3,s0+768,64);}
    for(int s=k0;s<ke;s++){
      if(mode==14){_tile_loadd(4, A+(size_t)r*K+s*32, K*2);} else {_tile_loadd(4, A+(size_t)r*K+s*512, 64);}
      _tile_loadd(6, pb+s*16*32, 128); _tile_dpbf16ps(0,4,6);
      _tile_loadd(7, pb+s*16*32+16, 128); _tile_dpbf16ps(1,4,7);
      if(mode==14){_tile_loadd(5, A+(size_t)(r+16)*K+s*32, K*2);} else {_tile_loadd(5, A+(size_t)(r+16)*K+s*512, 64);}
      _tile_dpbf16ps(2,5,6); _tile_dpbf16ps(3,5,7);
    }
    if(!last){_tile_stored(0,s0,64);_tile_stored(1,s0+256,64);_tile_stored(2,s0+512,64);_tile_stored(3,s0+768,64);}
    else {_tile_stored(0, C+(size_t)r*N+p*32, N*4);_tile_stored(1, C+(size_t)r*N+p*32+16, N*4);
    _tile_stored(2, C+(size_t)(r+16)*N+p*32, N*4);_tile_stored(3, C+(size_t)(r+16)*N+p*32+16, N*4);}
  }}} return;}
  if(mode>=11){ // 11: A streams, B fixed; 12: A fixed (strided), B streams; 13: both fixed, A strided
  for(int p=0;p<N/32;p++) for(int r=0;r<M;r+=32){
    _tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);
    const uint32_t*pb=B+(size_t)p*(K/2)*32;
    for(int s=0;s<steps;s++){
      size_t as = mode==11 ? (size_t)r*K+s*32 : 0; size_t bs = mode==12 ? s*16*32 : 0;
      const uint32_t*bb = mode==12? pb : B;
      _tile_loadd(4, A+as, K*2);
      _tile_loadd(6, bb+bs, 128);
      _tile_dpbf16ps(0,4,6);
      _tile_loadd(7, bb+bs+16, 128);
      _tile_dpbf16ps(1,4,7);
      _tile_loadd(5, A+as+16*K, K*2);
      _tile_dpbf16ps(2,5,6);
      _tile_dpbf16ps(3,5,7);
    }
    _tile_stored(0, C+(size_t)r*N+p*32, N*4);_tile_stored(1, C+(size_t)r*N+p*32+16, N*4);
    _tile_stored(2, C+(size_t)(r+16)*N+p*32, N*4);_tile_stored(3, C+(size_t)(r+16)*N+p*32+16, N*4);
  } return;}
  if(mode>=8){ int D=2; // mode 0 + software prefetch D steps ahead
  for(int p=0;p<N/32;p++) for(int r=0;r<M;r+=32){
    _tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);
    const uint32_t*pb=B+(size_t)p*(K/2)*32;
    for(int s=0;s<steps;s++){
      if(mode!=10) for(int q=0;q<32;q++) _mm_prefetch((const char*)(A+(size_t)(r+q)*K+(s+D)*32), _MM_HINT_T0);
      if(mode!=9) for(int q=0;q<32;q++) _mm_prefetch((const char*)(pb+(s+D)*16*32)+q*64, _MM_HINT_T0);
      _tile_loadd(4, A+(size_t)r*K+s*32, K*2);
      _tile_loadd(6, pb+s*16*32, 128);
      _tile_dpbf16ps(0,4,6);
      _tile_loadd(7, pb+s*16*32+16, 128);
      _tile_dpbf16ps(1,4,7);
      _tile_loadd(5, A+(size_t)(r+16)*K+s*32, K*2);
      _tile_dpbf16ps(2,5,6);
      _tile_dpbf16ps(3,5,7);
    }
    _tile_stored(0, C+(size_t)r*N+p*32, N*4);_tile_stored(1, C+(size_t)r*N+p*32+16, N*4);
    _tile_stored(2, C+(size_t)(r+16)*N+p*32, N*4);_tile_stored(3, C+(size_t)(r+16)*N+p*32+16, N*4);
  } return;}
  if(mode==0){ // current: per panel, per row block, full K
  for(int p=0;p<N/32;p++) for(int r=0;r<M;r+=32){
    _tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);
    const uint32_t*pb=B+(size_t)p*(K/2)*32;
    for(int s=0;s<steps;s++){
      _tile_loadd(4, A+(size_t)r*K+s*32, K*2);
      _tile_loadd(6, pb+s*16*32, 128);
      _tile_dpbf16ps(0,4,6);
      _tile_loadd(7, pb+s*16*32+16, 128);
      _tile_dpbf16ps(1,4,7);
      _tile_loadd(5, A+(size_t)(r+16)*K+s*32, K*2);
      _tile_dpbf16ps(2,5,6);
      _tile_dpbf16ps(3,5,7);
    }
    _tile_stored(0, C+(size_t)r*N+p*32, N*4);_tile_stored(1, C+(size_t)r*N+p*32+16, N*4);
    _tile_stored(2, C+(size_t)(r+16)*N+p*32, N*4);_tile_stored(3, C+(size_t)(r+16)*N+p*32+16, N*4);
  }} else if(mode==1){ // A packed in tiles: Ap[r/16][s][16][32]
  for(int p=0;p<N/32;p++) for(int r=0;r<M;r+=32){
    _tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);
    const uint32_t*pb=B+(size_t)p*(K/2)*32;
    const uint16_t*a0=A+(size_t)r*K, *a1=A+(size_t)(r+16)*K;
    for(int s=0;s<steps;s++){
      _tile_loadd(4, a0+s*512, 64);
      _tile_loadd(6, pb+s*16*32, 128);
      _tile_dpbf16ps(0,4,6);
      _tile_loadd(7, pb+s*16*32+16, 128);
      _tile_dpbf16ps(1,4,7);
      _tile_loadd(5, a1+s*512, 64);
      _tile_dpbf16ps(2,5,6);
      _tile_dpbf16ps(3,5,7);
    }
    _tile_stored(0, C+(size_t)r*N+p*32, N*4);_tile_stored(1, C+(size_t)r*N+p*32+16, N*4);
    _tile_stored(2, C+(size_t)(r+16)*N+p*32, N*4);_tile_stored(3, C+(size_t)(r+16)*N+p*32+16, N*4);
  }} else if(mode==2){ // L1 resident: same A,B tile every step
  for(int p=0;p<N/32;p++) for(int r=0;r<M;r+=32){
    _tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);
    for(int s=0;s<steps;s++){
      _tile_loadd(4, A, 64); _tile_loadd(6, B, 128); _tile_dpbf16ps(0,4,6);
      _tile_loadd(7, B+16, 128); _tile_dpbf16ps(1,4,7);
      _tile_loadd(5, A+512, 64); _tile_dpbf16ps(2,5,6); _tile_dpbf16ps(3,5,7);
    }
    _tile_stored(0, C+(size_t)r*N+p*32, N*4);_tile_stored(1, C+(size_t)r*N+p*32+16, N*4);
    _tile_stored(2, C+(size_t)(r+16)*N+p*32, N*4);_tile_stored(3, C+(size_t)(r+16)*N+p*32+16, N*4);
  }} else if(mode==3){ // row block outer, panels inner (A block reused from L1 when K small)
  for(int r=0;r<M;r+=32) for(int p=0;p<N/32;p++){
    _tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);
    const uint32_t*pb=B+(size_t)p*(K/2)*32;
    const uint16_t*a0=A+(size_t)r*K, *a1=A+(size_t)(r+16)*K;
    for(int s=0;s<steps;s++){
      _tile_loadd(4, a0+s*512, 64); _tile_loadd(6, pb+s*16*32, 128); _tile_dpbf16ps(0,4,6);
      _tile_loadd(7, pb+s*16*32+16, 128); _tile_dpbf16ps(1,4,7);
      _tile_loadd(5, a1+s*512, 64); _tile_dpbf16ps(2,5,6); _tile_dpbf16ps(3,5,7);
    }
    _tile_stored(0, C+(size_t)r*N+p*32, N*4);_tile_stored(1, C+(size_t)r*N+p*32+16, N*4);
    _tile_stored(2, C+(size_t)(r+16)*N+p*32, N*4);_tile_stored(3, C+(size_t)(r+16)*N+p*32+16, N*4);
  }} else if(mode>=4){ // K-blocked: per panel, per K chunk, per row block (C reloaded)
  int kc = mode==4?4:mode==5?8:mode==6?12:16; // steps per chunk
  for(int p=0;p<N/32;p++) for(int k0=0;k0<steps;k0+=kc) for(int r=0;r<M;r+=32){
    float*c0=C+(size_t)r*N+p*32, *c1=C+(size_t)(r+16)*N+p*32;
    if(k0==0){_tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);}
    else {_tile_loadd(0,c0,N*4);_tile_loadd(1,c0+16,N*4);_tile_loadd(2,c1,N*4);_tile_loadd(3,c1+16,N*4);}
    const uint32_t*pb=B+(size_t)p*(K/2)*32;
    const uint16_t*a0=A+(size_t)r*K, *a1=A+(size_t)(r+16)*K;
    int ke = k0+kc<steps?k0+kc:steps;
    for(int s=k0;s<ke;s++){
      _tile_loadd(4, a0+s*32, K*2); _tile_loadd(6, pb+s*16*32, 128); _tile_dpbf16ps(0,4,6);
      _tile_loadd(7, pb+s*16*32+16, 128); _tile_dpbf16ps(1,4,7);
      _tile_loadd(5, a1+s*32, K*2); _tile_dpbf16ps(2,5,6); _tile_dpbf16ps(3,5,7);
    }
    _tile_stored(0,c0,N*4);_tile_stored(1,c0+16,N*4);_tile_stored(2,c1,N*4);_tile_stored(3,c1+16,N*4);
  }}
}
int main(int argc,char**argv){
  syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
  int M=atoi(argv[1]),N=atoi(argv[2]),K=atoi(argv[3]);
  uint16_t*A=aligned_alloc(64,(size_t)M*K*2); uint32_t*B=aligned_alloc(64,(size_t)K*N*2); float*C=aligned_alloc(64,(size_t)M*N*4);
  for(size_t i=0;i<(size_t)M*K;i++)A[i]=0x3f80; for(size_t i=0;i<(size_t)K*N/2;i++)B[i]=0x3f803f80;
  cfg_t c; memset(&c,0,sizeof c); c.palette=1; for(int t=0;t<8;t++){c.rows[t]=16;c.colsb[t]=64;} _tile_loadconfig(&c);
  for(int mode=(argc>4?atoi(argv[4]):0);mode<19;mode++){ double best=1e9;
    for(int rep=0;rep<20;rep++){double t0=now(); gemm(M,N,K,A,B,C,mode); double t=now()-t0; if(t<best)best=t;}
    printf("mode %d: %.3f ms %.0f GFLOP/s\n",mode,best*1e3,2.0*M*N*K/best*1e-9);}
  return 0;}
