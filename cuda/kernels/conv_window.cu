// The sliding-window convolution (conv_window.h): forward (stride 1 or 2) and input gradient
// (stride 1 or 2) of layers with at most 64 output channels. Why: on the implicit GEMM's 16x256
// tile (LeNet-5, ResNet's first stage) a k-slice's SASS loop is 714 instructions for 140 FFMA
// (sm_90, tools/sass-loops.py, session 36); each multiply-add needs an element gathered through
// index arithmetic, because a GEMM column sees each input pixel once per tap. Here a block stages
// the input rows its outputs see once, in shared memory, and every thread slides its window over
// them:
// - a thread owns 8 output channels x 4 neighbouring pixels of one output row: 32 accumulators;
// - per (input channel c, kernel row ki) it loads 8 staged values of its row (two 16-byte shared
//   loads: 4 pixels + KW - 1 <= 8), then per tap kj the 8 channels' weights (two 16-byte loads,
//   the same address for the whole warp: a broadcast) and 32 fmaf: in sm_90 SASS the 3x3 loop is
//   115 instructions, 96 of them FFMA (5x5: 185, 160);
// - a block covers `rows` consecutive output rows of the N * OH rows (several images, or a band of
//   one) for `groups` groups of 8 output channels; the input is staged in chunks of channels;
// - at stride 2 (ResNet's downsampling 3x3 layers) a thread's 4 pixels see 9 staged values of a
//   row, three 16-byte loads, every other one per pixel.
// The input gradient is the same loop over grad_out with the kernel flipped (rows and columns
// taken from the far end: grad_in(h, w) sums grad_out(h + p - ki, w + p - kj) w(o, c, ki, kj)),
// the roles of C and O exchanged. At stride 2 only the taps with h + p - ki even reach row h
// (grad_out row (h + p - ki) / 2), so the rows of each parity are a phase of their own (grid.z):
// a stride-1 walk over grad_out rows with every other kernel row (cuDNN's strided dgrad and
// conv_phases.cu split the same way). The 4 neighbouring pixels of a thread alternate in parity,
// so per pixel and tap kj the parity of w + p - kj is known at compile time (the template's P is
// p's): each pixel takes its one or two taps of the three from 4 staged grad_out values, 6
// products of 12 for 4 pixels.
// Each output is one thread's fmaf chain over (input channel, ki, kj) in order, from 0, with the
// padding's zeros multiplied in: the implicit GEMM's FMA cores compute the same chain (k = (c,
// ki, kj) in order, zeros outside the image; a strided input gradient's phase GEMMs the taps of
// its phase, in order), so under fp32 the results are theirs bit for bit. The store is theirs
// too: forward v + bias (or + 0) then the ReLU's `r > 0 ? r : 0`; the input gradient overwrites
// or adds once. Under TF32 / bf16 both operands are rounded as they are staged
// (staged_rounding.cuh, as the tensor-core fragments round them) and multiplied in fp32, exactly:
// the twin on rounded inputs. CPU twin: the naive convolution in tensor/cpu/conv.cpp
// (cpu::conv2d_forward, cpu::conv2d_backward_input); tests/gpu/conv_window_gpu_test.cpp compares
// the kernel with it and with the implicit GEMM.
#include <echelon/cuda/kernels/conv_window.h>

#include <algorithm>
#include <atomic>
#include <climits>

#include <echelon/base/error.h>
#include <echelon/cuda/launch.h>
#include <echelon/cuda/switches.h>
#include <echelon/kernels/fast_div.h>

// Quoted: tools/cudasim-mutants.sh plants bugs in a copy of the kernels folder, these included.
#include "pinned.cuh"
#include "staged_rounding.cuh"

namespace echelon::cuda {
namespace {

constexpr int kOutPerThread = 8;  // output channels a thread owns: two float4s of weights
constexpr int kPixels = 4;        // neighbouring output pixels a thread owns
// Whether the kernel is the input gradient of a stride-2 convolution: its 4 pixels read grad_out
// columns at half their pace.
constexpr bool halves(bool flip, int stride) {
  return flip && stride == 2;
}
// Staged values a thread loads per kernel row: its 4 pixels' (4 - 1) * stride + KW, in float4s
// (stride 1: two; stride 2, 3x3: three); at half pace (a stride-2 input gradient) the 3 grad_out
// columns its pixels reach, in two float2s.
constexpr int window_of(bool flip, int stride, int kernel_w) {
  return halves(flip, stride) ? 4 : ((kPixels - 1) * stride + kernel_w + 3) / 4 * 4;
}
constexpr int kMaxThreads = 256;  // a block's threads: groups x pixel threads
constexpr int kMaxGroups = 8;     // groups of 8 output channels a block may own (64 channels)
// Output channels of the pass it takes: up to 64 the heuristic's choice; up to 512 (VGG-16's
// widest) one more candidate for the autotuner, in blocks of 64 along grid.y, each staging the
// same input rows (untimed on a GPU: whether it ever beats the GEMM tiles there is for the tuner).
constexpr int64_t kPreferredChannels = kMaxGroups * kOutPerThread;
constexpr int64_t kMaxChannels = 512;
constexpr int kMaxKernelH = 7;
constexpr int kMaxRowThreads = 256;  // pixel threads of one output row: OW <= 1024
// Shared memory a block stages into: 192 bytes a thread, 48 KiB (no opt-in needed) at 256. Scaled
// by the block's threads, so that small blocks (ResNet's 8x8 and 16x16 layers take blocks of one
// or two warps) stage fewer channels at a time and fit many to an SM, rather than 4 of any size.
constexpr size_t kStageBytesPerThread = 192;
#if ECHELON_CUDA_SIM
// Test-sized problems then get several blocks, and blocks of several images or of a band.
constexpr int64_t kWindowBlocks = 4;
#else
constexpr int64_t kWindowBlocks = 2 * 132;  // two blocks per SM of an H200; to tune on the GPU
#endif

// The output rows one grid.z slice walks: all of them, or (a stride-2 input gradient) those of
// one parity, each seeing every other kernel row.
struct RowPhase {
  int rows;               // output rows of an image in the phase
  int window;             // staged rows one output row sees: the phase's kernel rows
  int pad_top;            // staged row 0 of an image's segment is input row -pad_top
  int first_ki;           // the weight row of the window's first tap (then every ki_step-th)
  int first_row;          // the written row of the phase's row 0 (then every row_step-th)
  int total_rows;         // N * rows
  FastDiv by_image_rows;  // image_rows(the walk's stride), for the staging's split of a row

  // The staged rows of a whole image's segment: the input rows its output rows see.
  __host__ __device__ int image_rows(int stride) const { return (rows - 1) * stride + window; }
};

// Everything the kernel needs, in 32 bits (conv_gemm_fits bounds every operand below 2^31).
// "in" is what the window slides over (x forward, grad_out for the input gradient), "out" what
// it writes (y, grad_in).
struct WindowPlan {
  int in_ch, in_h, in_w;     // the staged tensor's channels and image size
  int out_ch, out_h, out_w;  // the written tensor's
  int kernel_h, kernel_w;    // the weights'
  int stride;                // of the walk over staged rows: the forward's (1 or 2), else 1
  int pad_left;              // staged column 0 is input column -pad_left
  int w_out, w_in;           // weight strides between output channels and between input channels
  int groups;                // groups of 8 output channels per block (a power of two)
  int pixel_threads;         // threads per group: a multiple of 32, >= row_threads
  int row_threads;           // threads per output row: ceil(out_w / 4)
  int rows;                  // output rows per block: pixel_threads / row_threads
  int pitch;                 // floats per staged row: every thread's window fits in it
  int row_lanes;             // lanes staging one row, a float4 each: min(pitch / 4, 32)
  int rows_per_pass;         // rows a warp stages at once: 32 / row_lanes
  FastDiv by_row_lanes;      // splits a lane into (row of the pass, float4 of the row)
  int ki_step, row_step;     // 2 for a stride-2 input gradient's phases, else 1
  RowPhase phase[2];         // grid.z's: one, or a stride-2 input gradient's two parities

  FastDiv by_taps;  // kernel_h * kernel_w, for the staging's split of a weight index
  int x_rows;       // staged rows a block may need, in either phase
  int chunk;        // input channels staged at a time
  int blocks_x, blocks_y, phases;
  Rounding rounding;  // of both operands as they are staged (TF32 / bf16)

  __host__ __device__ int x_plane() const { return x_rows * pitch; }
  __host__ __device__ int quads() const { return pitch >> 2; }  // pitch_of: a multiple of 4
  __host__ __device__ int taps() const { return kernel_h * kernel_w; }
  __host__ __device__ int w_plane() const { return taps() * groups * kOutPerThread; }
  size_t shared_bytes() const {
    return static_cast<size_t>(chunk) * (x_plane() + w_plane()) * sizeof(float);
  }
};

#if defined(__CUDACC__) || ECHELON_CUDA_SIM
// Stages input channels [c0, c0 + channels) of the block's first `needed` staged rows and
// their weights:
// x_stage (chunk, x_rows, pitch): with s' = s + a0 * stride, staged row s of the block is row
// s' % image_rows - pad_top of image n0 + s' / image_rows (each image's segment carries its own
// halo rows), columns from -pad_left; zero outside the image.
// w_stage (chunk, KH, KW, groups * 8): the block's output channels side by side, zero past out_ch.
// R: p.rounding, one copy per rounding (with the choice inside the loops, the 5x5 kernels spilled
// at 80 registers).
template <Rounding R>
__device__ void stage_chunk(const WindowPlan& p, const RowPhase& r, int c0, int channels,
                            int needed, int n0, int a0, const float* __restrict__ in,
                            const float* __restrict__ w, float* x_stage, float* w_stage) {
  // Pinned: the indices below would be hoisted out of the chunk loop and held across its FMAs
  // (the stride-2 forward spilled 12 bytes at its 80-register cap).
  const int tid = pinned(static_cast<int>(threadIdx.x));
  const int lane = tid % 32, warp = tid / 32, warps = blockDim.x / 32;
  // The staged rows, warp-strided over the channels x needed rows, rows_per_pass of them a warp
  // at a time: lane (sub, quad) stages the float4s quad, quad + row_lanes, .. of its row sub
  // (one a lane unless a row is wider than a warp: row_lanes = min(pitch / 4, 32)). Until
  // session 44 a warp staged one row at a time, a float a lane: on the 12-float rows of ResNet's
  // 8x8 layers 20 of 32 lanes idled, and every row paid its header in every lane; staging was
  // about 3x the FMA loop there. (cl, s) steps along by whole passes without a division, and s's
  // image comes from the plan's FastDiv.
  int sub, quad;
  p.by_row_lanes.divmod(lane, sub, quad);
  if (sub < p.rows_per_pass) {
    const int step = warps * p.rows_per_pass, step_cl = step / needed, step_s = step % needed;
    const int first = warp * p.rows_per_pass + sub;
    int cl = first / needed, s = first % needed;
    for (; cl < channels; cl += step_cl, s += step_s) {
      if (s >= needed) s -= needed, ++cl;
      if (cl >= channels) break;
      int segment, from_top;
      r.by_image_rows.divmod(s + a0 * p.stride, segment, from_top);
      const int ih = from_top - r.pad_top;
      float4* const dst = reinterpret_cast<float4*>(x_stage + cl * p.x_plane() + s * p.pitch);
      if (ih >= 0 && ih < p.in_h) {
        // In 32 bits: an element of `in` (conv_gemm_fits), and 20 fewer instructions a pass.
        const float* const src = in + (((n0 + segment) * p.in_ch + c0 + cl) * p.in_h + ih) * p.in_w;
        for (int q = quad; q < p.quads(); q += p.row_lanes) {
          const int iw = 4 * q - p.pad_left;
          // 0 <= iw + e < in_w as one unsigned compare.
          const auto at = [&](int e) {
            const bool inside = static_cast<unsigned>(iw + e) < static_cast<unsigned>(p.in_w);
            return inside ? staged(src[iw + e], R) : 0.0f;
          };
          dst[q] = make_float4(at(0), at(1), at(2), at(3));
        }
      } else {
        for (int q = quad; q < p.quads(); q += p.row_lanes) dst[q] = make_float4(0, 0, 0, 0);
      }
    }
  }
  // The weights: w_stage[(cl * taps + tap) * outs + o] for the block's outs output channels.
  // outs = groups * 8 divides blockDim.x (pixel_threads is a multiple of 32), so a thread's o is
  // the same in every step. Weight i = (cl, tap) of the chunk sits at cl * w_in + tap past the
  // chunk's first: at i in the forward (w_in = taps), after one FastDiv in the input gradient.
  const int outs = p.groups * kOutPerThread, o = tid % outs;
  const int oc = static_cast<int>(blockIdx.y) * outs + o;  // the output channel
  const int step = blockDim.x / outs, weights = channels * p.taps();
  const float* const w_chunk = w + (oc < p.out_ch ? oc * p.w_out + c0 * p.w_in : 0);
  if (oc >= p.out_ch) {
    for (int i = tid / outs; i < weights; i += step) w_stage[i * outs + o] = 0.0f;
  } else if (p.w_in == p.taps()) {
    for (int i = tid / outs; i < weights; i += step) w_stage[i * outs + o] = staged(w_chunk[i], R);
  } else {
    for (int i = tid / outs; i < weights; i += step) {
      int channel, tap;
      p.by_taps.divmod(i, channel, tap);
      w_stage[i * outs + o] = staged(w_chunk[channel * p.w_in + tap], R);
    }
  }
}

// Flip: the input gradient (the kernel's rows and columns from the far end). S: the stride (2:
// the forward of ResNet's downsampling 3x3 layers, or with Flip their input gradient, whose
// pixel px takes tap kj when px + P - kj is even, P the padding's parity).
// Three blocks of 256 an SM: up to 80 registers (left free, ptxas chose 64 for the stride-2 input
// gradient and spilled).
template <int KW, bool Flip, int S, int P>
__global__ void __launch_bounds__(kMaxThreads, 3)
    conv_window_kernel(WindowPlan p, const float* __restrict__ in, const float* __restrict__ w,
                       const float* __restrict__ bias, float* __restrict__ out, bool relu,
                       bool accumulate) {
  constexpr bool kHalves = halves(Flip, S);
  static_assert(!kHalves || KW == 3, "the stride-2 input gradient is the 3-wide kernel's");
  constexpr int kWindow = window_of(Flip, S, KW);
  constexpr int kRowStride = Flip ? 1 : S;  // staged rows between neighbouring output rows
  const RowPhase& r = p.phase[blockIdx.z];
  const int r0 = static_cast<int>(blockIdx.x) * p.rows;
  if (r0 >= r.total_rows) return;   // the shorter phase's grid tail: the whole block
  ECH_DYNAMIC_SHARED(float, smem);  // p.shared_bytes()
  float* const x_stage = smem;
  float* const w_stage = smem + p.chunk * p.x_plane();
  const int image_rows = r.image_rows(kRowStride);
  const int n0 = r0 / r.rows, a0 = r0 - n0 * r.rows;
  // The staged rows the block's last output row reaches (the plan's x_rows bounds them).
  const int last = min(r0 + p.rows, r.total_rows) - 1, last_n = last / r.rows;
  const int needed =
      (last_n - n0) * image_rows + (last - last_n * r.rows - a0) * kRowStride + r.window;
  // This thread: group g's 8 channels (warp-uniform: pixel_threads is a multiple of 32), the
  // phase's output row r0 + row, pixels 4 * col4 .. + 3.
  const int g = threadIdx.x / p.pixel_threads, t = threadIdx.x - g * p.pixel_threads;
  const int row = t / p.row_threads, col4 = t - row * p.row_threads;
  const int q = r0 + row;
  const bool active = row < p.rows && q < r.total_rows;
  const int n = q / r.rows, a = q - n * r.rows;
  // Its staged row for the window's first row: its image's segment, then its row in it.
  const int base = (n - n0) * image_rows + (a - a0) * kRowStride;
  float acc[kPixels][kOutPerThread] = {};
  for (int c0 = 0; c0 < p.in_ch; c0 += p.chunk) {
    const int channels = min(p.chunk, p.in_ch - c0);
    __syncthreads();  // every thread is done with the previous chunk
    with_rounding(p.rounding, [&](auto rounding) {
      stage_chunk<decltype(rounding)::value>(p, r, c0, channels, needed, n0, a0, in, w, x_stage,
                                             w_stage);
    });
    __syncthreads();
    if (!active) continue;
    const float* xs = x_stage + base * p.pitch + (kHalves ? 2 : kPixels * S) * col4;
    const float* ws = w_stage + g * kOutPerThread;
    for (int c = 0; c < channels; ++c, xs += p.x_plane(), ws += p.w_plane()) {
      for (int tap = 0; tap < r.window; ++tap) {
        const float* const xr = xs + (Flip ? r.window - 1 - tap : tap) * p.pitch;
        float v[kWindow];
#pragma unroll
        for (int j = 0; j < kWindow; j += kHalves ? 2 : 4) {
          if constexpr (kHalves) {
            const float2 two = *reinterpret_cast<const float2*>(xr + j);
            v[j] = two.x, v[j + 1] = two.y;
          } else {
            const float4 four = *reinterpret_cast<const float4*>(xr + j);
            v[j] = four.x, v[j + 1] = four.y, v[j + 2] = four.z, v[j + 3] = four.w;
          }
        }
        const int ki = r.first_ki + p.ki_step * tap;
        const float* const wk = ws + ki * KW * p.groups * kOutPerThread;
#pragma unroll
        for (int kj = 0; kj < KW; ++kj) {
          const float4 w_lo = *reinterpret_cast<const float4*>(wk + kj * p.groups * kOutPerThread);
          const float4 w_hi =
              *reinterpret_cast<const float4*>(wk + kj * p.groups * kOutPerThread + 4);
          const float wv[kOutPerThread] = {w_lo.x, w_lo.y, w_lo.z, w_lo.w,
                                           w_hi.x, w_hi.y, w_hi.z, w_hi.w};
#pragma unroll
          for (int px = 0; px < kPixels; ++px) {
            float x;
            if constexpr (kHalves) {
              // Pixel px takes tap kj when px + P - kj is even, from grad_out column
              // (px + P - kj) / 2 after the thread's first (staged from column -pad_left,
              // pad_left = 1 - P - (p - P) / 2).
              if ((px + P - kj) % 2 != 0) continue;
              x = v[(px + P - kj) / 2 + 1 - P];
            } else {
              x = v[px * S + (Flip ? KW - 1 - kj : kj)];
            }
#pragma unroll
            for (int o = 0; o < kOutPerThread; ++o) acc[px][o] = fmaf(wv[o], x, acc[px][o]);
          }
        }
      }
    }
  }
  if (!active) return;
  const int o0 = (static_cast<int>(blockIdx.y) * p.groups + g) * kOutPerThread;
  const int oh = r.first_row + p.row_step * a;
#pragma unroll
  for (int o = 0; o < kOutPerThread; ++o) {
    if (o0 + o >= p.out_ch) break;
    float* const dst =
        out + ((static_cast<int64_t>(n) * p.out_ch + o0 + o) * p.out_h + oh) * p.out_w;
    const float b = !Flip && bias ? bias[o0 + o] : 0.0f;
#pragma unroll
    for (int px = 0; px < kPixels; ++px) {
      const int ow = kPixels * col4 + px;
      if (ow >= p.out_w) break;
      if constexpr (Flip) {
        dst[ow] = accumulate ? dst[ow] + acc[px][o] : acc[px][o];
      } else {
        const float v = acc[px][o] + b;
        dst[ow] = !relu || v > 0.0f ? v : 0.0f;
      }
    }
  }
}
#endif

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The pass as a window, in 64 bits: forward slides over x with w as it is, at the convolution's
// stride; the input gradient slides over grad_out with the kernel flipped and padding KH - 1 - ph
// (stride 1: grad_in's size), or at stride 2 over each row parity's phase.
struct Sides {
  int64_t in_ch, in_h, in_w, out_ch, out_h, out_w, pad_left, w_out, w_in;
  int64_t stride;       // of the walk over staged rows
  bool halves;          // a stride-2 input gradient: the thread's pixels at half pace
  int64_t phases;       // 1, or a stride-2 input gradient's 2 (1 when grad_in has one row)
  int64_t rows[2];      // output rows of an image in each phase
  int64_t window[2];    // staged rows an output row sees
  int64_t pad_top[2];   // staged row 0 of a segment is input row -pad_top
  int64_t first_ki[2];  // the kernel row of the window's first tap
};

Sides sides_of(ConvPass pass, const Conv2dGeometry& a) {
  const int64_t taps = a.kernel_h * a.kernel_w;
  Sides s{};
  s.phases = 1;
  if (pass == ConvPass::Forward) {
    s.in_ch = a.c, s.in_h = a.h, s.in_w = a.w, s.out_ch = a.o, s.out_h = a.out_h, s.out_w = a.out_w;
    s.pad_left = a.pad_w, s.w_out = a.c * taps, s.w_in = taps, s.stride = a.stride_h;
    s.rows[0] = a.out_h, s.window[0] = a.kernel_h, s.pad_top[0] = a.pad_h;
    return s;
  }
  s.in_ch = a.o, s.in_h = a.out_h, s.in_w = a.out_w, s.out_ch = a.c, s.out_h = a.h, s.out_w = a.w;
  s.w_out = taps, s.w_in = a.c * taps, s.stride = 1;
  if (a.stride_h == 1) {
    s.pad_left = a.kernel_w - 1 - a.pad_w;
    s.rows[0] = a.h, s.window[0] = a.kernel_h, s.pad_top[0] = a.kernel_h - 1 - a.pad_h;
    return s;
  }
  // Stride 2: rows h = ph + 2i of parity ph take the kernel rows ki = k0 + 2t with
  // k0 = (ph + pad) % 2, from grad_out row i + e - t, e = (ph + pad - k0) / 2 (conv_phases.cu);
  // columns: see the kernel (P = pad_w % 2).
  const int64_t parity = a.pad_w % 2;
  s.pad_left = 1 - parity - (a.pad_w - parity) / 2;
  s.halves = true;
  s.phases = std::min<int64_t>(a.h, 2);
  for (int64_t ph = 0; ph < s.phases; ++ph) {
    const int64_t k0 = (ph + a.pad_h) % 2;
    s.rows[ph] = (a.h - ph + 1) / 2;
    s.window[ph] = (a.kernel_h - k0 + 1) / 2;
    s.pad_top[ph] = s.window[ph] - 1 - (ph + a.pad_h - k0) / 2;
    s.first_ki[ph] = k0;
  }
  return s;
}

// Staged rows a block of `rows` output rows may need, in either phase: an image's segment of r of
// them takes (r - 1) * stride + window input rows (window >= stride), and a block touches at most
// (rows - 1) / rows_per_image + 2 images.
int64_t staged_rows(int64_t rows, const Sides& s) {
  int64_t most = 0;
  for (int64_t ph = 0; ph < s.phases; ++ph)
    most =
        std::max(most, rows * s.stride + ((rows - 1) / s.rows[ph] + 2) * (s.window[ph] - s.stride));
  return most;
}

// Floats per staged row, a multiple of 4: every thread's window (4 pixels at the stride, or the
// 4 values of a stride-2 input gradient's 2 * col4 ..) stays in the row.
int64_t pitch_of(const Sides& s, int64_t row_threads) {
  if (s.halves) return 4 * ceil_div(row_threads, 2) + 4;
  return kPixels * s.stride * row_threads + kPixels;
}

// The shared memory one input channel takes in a block of `groups` x `pixel_threads`: its staged
// rows and its weights.
size_t channel_bytes(const Sides& s, int64_t groups, int64_t pixel_threads, int64_t kernel_h,
                     int64_t kernel_w) {
  const int64_t row_threads = ceil_div(s.out_w, kPixels);
  const int64_t floats = staged_rows(pixel_threads / row_threads, s) * pitch_of(s, row_threads) +
                         kernel_h * kernel_w * groups * kOutPerThread;
  return static_cast<size_t>(floats) * sizeof(float);
}

size_t stage_budget(int64_t block_threads) {
  return kStageBytesPerThread * static_cast<size_t>(block_threads);
}

// The fewest pixel threads a block needs for one output row: a power of two, at least a warp.
int64_t least_threads(int64_t row_threads) {
  int64_t threads = 32;
  while (threads < row_threads) threads *= 2;
  return threads;
}

// The block shape: the most channel groups (a power of two covering all of them, at most 8) and
// then the most pixel threads (256 / groups down to a warp, at least one output row) whose grid
// still has kWindowBlocks blocks; failing that, the shape with the most blocks.
WindowPlan plan_for(ConvPass pass, const Conv2dGeometry& a) {
  const Sides s = sides_of(pass, a);
  const int64_t row_threads = ceil_div(s.out_w, kPixels);
  const int64_t needed_groups = ceil_div(s.out_ch, kOutPerThread);
  int64_t top_groups = 1;
  while (top_groups < std::min<int64_t>(needed_groups, kMaxGroups)) top_groups *= 2;
  const int64_t phase_rows = a.n * s.rows[0];  // the longest phase's (parity 0's at stride 2)
  int64_t best_groups = 0, best_threads = 0, best_blocks = 0;
  for (int64_t groups = top_groups; groups >= 1 && best_blocks < kWindowBlocks; groups /= 2)
    for (int64_t threads = kMaxThreads / groups;
         threads >= least_threads(row_threads) && best_blocks < kWindowBlocks; threads /= 2) {
      if (channel_bytes(s, groups, threads, a.kernel_h, a.kernel_w) >
          stage_budget(groups * threads))
        continue;
      const int64_t blocks =
          ceil_div(phase_rows, threads / row_threads) * s.phases * ceil_div(needed_groups, groups);
      if (blocks > best_blocks) best_groups = groups, best_threads = threads, best_blocks = blocks;
    }
  WindowPlan p{};
  const auto narrow = [](int64_t v) { return static_cast<int>(v); };
  p.in_ch = narrow(s.in_ch), p.in_h = narrow(s.in_h), p.in_w = narrow(s.in_w);
  p.out_ch = narrow(s.out_ch), p.out_h = narrow(s.out_h), p.out_w = narrow(s.out_w);
  p.kernel_h = narrow(a.kernel_h), p.kernel_w = narrow(a.kernel_w), p.stride = narrow(s.stride);
  p.pad_left = narrow(s.pad_left);
  p.w_out = narrow(s.w_out), p.w_in = narrow(s.w_in);
  p.groups = narrow(best_groups), p.pixel_threads = narrow(best_threads);
  p.row_threads = narrow(row_threads);
  p.rows = narrow(best_threads / row_threads);
  p.pitch = narrow(pitch_of(s, row_threads));
  p.row_lanes = std::min(p.quads(), 32);
  p.rows_per_pass = 32 / p.row_lanes;
  p.by_row_lanes = FastDiv(p.row_lanes);
  p.ki_step = p.row_step = s.halves ? 2 : 1;
  p.phases = narrow(s.phases);
  for (int64_t ph = 0; ph < s.phases; ++ph) {
    RowPhase r{narrow(s.rows[ph]),
               narrow(s.window[ph]),
               narrow(s.pad_top[ph]),
               narrow(s.first_ki[ph]),
               narrow(ph),
               narrow(a.n * s.rows[ph]),
               FastDiv{}};
    r.by_image_rows = FastDiv(r.image_rows(p.stride));
    p.phase[ph] = r;
  }
  p.by_taps = FastDiv(p.taps());
  p.x_rows = narrow(staged_rows(p.rows, s));
  const size_t per_channel = channel_bytes(s, best_groups, best_threads, a.kernel_h, a.kernel_w);
  const size_t budget = stage_budget(best_groups * best_threads);
  p.chunk = narrow(std::clamp<int64_t>(static_cast<int64_t>(budget / per_channel), 1, s.in_ch));
  p.blocks_x = narrow(ceil_div(phase_rows, p.rows));
  p.blocks_y = narrow(ceil_div(needed_groups, best_groups));
  p.rounding = staged_rounding();
  return p;
}

std::atomic<bool>& window_flag() {
  static std::atomic<bool> flag = switches::conv_window();
  return flag;
}

void launch(ConvPass pass, const Conv2dGeometry& a, const float* in, const float* w,
            const float* bias, float* out, cudaStream_t stream, bool relu, bool accumulate) {
  const char* op =
      pass == ConvPass::Forward ? "conv2d_forward (window)" : "conv2d_backward_input (window)";
  ECH_CHECK(conv_window_fits(pass, a), op, ": the window kernel does not take this convolution (",
            a.c, " -> ", a.o, " channels, kernel ", a.kernel_h, "x", a.kernel_w, ", stride ",
            a.stride_h, "x", a.stride_w, ", dilation ", a.dilation_h, "x", a.dilation_w,
            ", output ", a.out_h, "x", a.out_w, ")");
  const WindowPlan p = plan_for(pass, a);
  const dim3 grid(static_cast<unsigned>(p.blocks_x), static_cast<unsigned>(p.blocks_y),
                  static_cast<unsigned>(p.phases));
  const unsigned threads = static_cast<unsigned>(p.groups * p.pixel_threads);
  const size_t bytes = p.shared_bytes();
  const auto run = [&](const char* name, auto kernel) {
    ECH_LAUNCH_NAMED(name, grid, threads, bytes, stream, kernel)
    (p, in, w, bias, out, relu, accumulate);
  };
  const bool strided = a.stride_h == 2;
  if (pass == ConvPass::BackwardData && strided && a.pad_w % 2 == 0)
    run("conv_window_kernel<3, true, 2, 0>", conv_window_kernel<3, true, 2, 0>);
  else if (pass == ConvPass::BackwardData && strided)
    run("conv_window_kernel<3, true, 2, 1>", conv_window_kernel<3, true, 2, 1>);
  else if (pass == ConvPass::BackwardData && a.kernel_w == 3)
    run("conv_window_kernel<3, true, 1, 0>", conv_window_kernel<3, true, 1, 0>);
  else if (pass == ConvPass::BackwardData)
    run("conv_window_kernel<5, true, 1, 0>", conv_window_kernel<5, true, 1, 0>);
  else if (strided)
    run("conv_window_kernel<3, false, 2, 0>", conv_window_kernel<3, false, 2, 0>);
  else if (a.kernel_w == 3)
    run("conv_window_kernel<3, false, 1, 0>", conv_window_kernel<3, false, 1, 0>);
  else
    run("conv_window_kernel<5, false, 1, 0>", conv_window_kernel<5, false, 1, 0>);
  ECH_CUDA_CHECK_LAUNCH(op);
}

}  // namespace

bool conv_window_fits(ConvPass pass, const Conv2dGeometry& a) {
  if (pass == ConvPass::BackwardWeight) return false;
  // Stride 1, or 2 for a 3-wide kernel at least 2 high (ResNet's downsampling).
  const bool strided = a.stride_h == 2 && a.stride_w == 2 && a.kernel_w == 3 && a.kernel_h >= 2;
  const bool window =
      (a.kernel_w == 3 || a.kernel_w == 5) && a.kernel_h >= 1 && a.kernel_h <= kMaxKernelH &&
      ((a.stride_h == 1 && a.stride_w == 1) || strided) && a.dilation_h == 1 && a.dilation_w == 1;
  if (!window || a.n <= 0 || a.c <= 0 || a.o <= 0 || a.out_h <= 0 || a.out_w <= 0) return false;
  // The input gradient's padding KH - 1 - p must not be negative.
  if (pass == ConvPass::BackwardData && (a.pad_h >= a.kernel_h || a.pad_w >= a.kernel_w))
    return false;
  const Sides s = sides_of(pass, a);
  const int64_t row_threads = ceil_div(s.out_w, kPixels);
  return s.out_ch <= kMaxChannels && row_threads <= kMaxRowThreads &&
         channel_bytes(s, 1, least_threads(row_threads), a.kernel_h, a.kernel_w) <=
             stage_budget(least_threads(row_threads)) &&
         conv_gemm_fits(a) && a.n * s.out_h <= INT_MAX;
}

bool conv_window_preferred(ConvPass pass, const Conv2dGeometry& a) {
  return conv_window_fits(pass, a) && sides_of(pass, a).out_ch <= kPreferredChannels;
}

void conv2d_forward_window(const Conv2dGeometry& a, const float* x, const float* w,
                           const float* bias, float* y, cudaStream_t stream, bool relu) {
  launch(ConvPass::Forward, a, x, w, bias, y, stream, relu, false);
}

void conv2d_backward_input_window(const Conv2dGeometry& a, const float* grad_out, const float* w,
                                  float* grad_in, cudaStream_t stream, bool accumulate) {
  launch(ConvPass::BackwardData, a, grad_out, w, nullptr, grad_in, stream, false, accumulate);
}

void set_conv_window(bool on) {
  window_flag().store(on, std::memory_order_relaxed);
}

bool conv_window() {
  return window_flag().load(std::memory_order_relaxed);
}

}  // namespace echelon::cuda
