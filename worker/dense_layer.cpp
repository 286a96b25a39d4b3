#include "worker/dense_layer.h"

#include <algorithm>
#include <cassert>
#include <utility>

namespace baton::worker {

namespace {

namespace ei = Eigen::internal;

template <class S>
using packet = typename ei::packet_traits<S>::type;
template <class S>
constexpr idx lanes = ei::unpacket_traits<packet<S>>::size;

// Register tiles: `wide` for long output rows (forward, dW), `tall` for the dX^T product whose
// rows are one padded batch. With 16 vector registers (AVX2) both are 6 rows x 2 vectors, the
// shape BLIS and OpenBLAS use there: 12 accumulators, 2 loads and 6 broadcasts per 12 FMAs. The
// wider 4 x 3 tile had 12 accumulators too, but left no register for its third operand, so the
// compiler re-read R from memory in every FMA (16 loads per 12 FMAs: load-port bound). A tile's
// shape never changes a sum's order, so it never changes a result.
constexpr bool many_registers = EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS >= 32;
constexpr int wide_rows = many_registers ? 8 : 6, wide_vectors = many_registers ? 3 : 2;
constexpr int tall_rows = many_registers ? 12 : 6, tall_vectors = 2;
// Kernel rows per backward block: a multiple of both tiles' rows.
constexpr idx panel_rows = 24;
// Forward sums run in blocks of this many kernel rows (partial sums go through the output, which
// changes no rounding): a block of W's columns and the batch's slice of X then stay in L1 while
// every batch tile reuses them (128: 67 GF/s, 256: 57, on a 2-core EPYC with AVX2).
constexpr idx forward_depth_block = 128;
// How far ahead, in column blocks, a tile prefetches the row of R it reads: R's rows are far apart
// (a whole kernel row), so each row of the next panels is a separate stream that the hardware
// prefetchers do not follow. Two blocks ahead took the forward pass from 45 to 57 GF/s and dW
// from 58 to 65 (measured interleaved, medians of 40).
constexpr idx prefetch_blocks = 2;

idx round_up(idx n, idx m) { return (n + m - 1) / m * m; }

// The product every pass uses. For i < RI, v < NV, lane l, column c = v * lanes + l:
//   O[i * ldo + c] (+)= sum_{p < depth} L[i * li + p * lp] * R[p * ldr + c]
// summed in order of p in one register; with `first` false the sum continues from O.
template <class S, int RI, int NV>
void tile(bool first, const S* L, idx li, idx lp, const S* R, idx ldr, S* O, idx ldo, idx depth) {
  using P = packet<S>;
  constexpr idx w = lanes<S>;
  P acc[RI][NV];
#pragma GCC unroll 16
  for (int i = 0; i < RI; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      acc[i][v] = first ? ei::pset1<P>(S(0)) : ei::ploadu<P>(O + i * ldo + v * w);
    }
  }
  for (idx p = 0; p < depth; ++p) {
    const S* r = R + p * ldr;
    // A hint only: past the end of R it touches nothing.
    for (idx q = 0; q < NV * w; q += 64 / static_cast<idx>(sizeof(S))) {
      ei::prefetch(r + prefetch_blocks * NV * w + q);
    }
    P b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = ei::ploadu<P>(r + v * w);
    const S* l = L + p * lp;
#pragma GCC unroll 16
    for (int i = 0; i < RI; ++i) {
      const P a = ei::pset1<P>(l[i * li]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = ei::pmadd(a, b[v], acc[i][v]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < RI; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) ei::pstoreu(O + i * ldo + v * w, acc[i][v]);
  }
}

// tile<RI, NV> for a row count known only at run time (the last rows of a block).
template <class S, int RI, int NV>
void tile_rows(int rows, bool first, const S* L, idx li, idx lp, const S* R, idx ldr, S* O, idx ldo,
               idx depth) {
  if constexpr (RI > 0) {
    if (rows == RI) return tile<S, RI, NV>(first, L, li, lp, R, ldr, O, ldo, depth);
    tile_rows<S, RI - 1, NV>(rows, first, L, li, lp, R, ldr, O, ldo, depth);
  }
}

template <class S, int RI, int NV>
void column_block(idx rows, bool first, const S* L, idx li, idx lp, const S* R, idx ldr, S* O,
                  idx ldo, idx depth) {
  idx i = 0;
  for (; i + RI <= rows; i += RI) {
    tile<S, RI, NV>(first, L + i * li, li, lp, R, ldr, O + i * ldo, ldo, depth);
  }
  if (i < rows) {
    tile_rows<S, RI - 1, NV>(static_cast<int>(rows - i), first, L + i * li, li, lp, R, ldr,
                             O + i * ldo, ldo, depth);
  }
}

template <class S, int RI, int NV>
void vector_columns(int vectors, idx rows, bool first, const S* L, idx li, idx lp, const S* R,
                    idx ldr, S* O, idx ldo, idx depth) {
  if constexpr (NV > 0) {
    if (vectors == NV)
      return column_block<S, RI, NV>(rows, first, L, li, lp, R, ldr, O, ldo, depth);
    vector_columns<S, RI, NV - 1>(vectors, rows, first, L, li, lp, R, ldr, O, ldo, depth);
  }
}

// O[rows x cols] = L[rows x depth] R[depth x cols] with L(i, p) = L[i * li + p * lp] (so L can
// be read transposed) and R, O row-major. Sums over p run in blocks of `depth_block`.
template <class S, int RI, int NV>
void gemm(idx rows, idx cols, idx depth, const S* L, idx li, idx lp, const S* R, idx ldr, S* O,
          idx ldo, idx depth_block) {
  if (rows <= 0 || cols <= 0) return;
  constexpr idx w = lanes<S>;
  if (depth == 0) {
    for (idx i = 0; i < rows; ++i) std::fill(O + i * ldo, O + i * ldo + cols, S(0));
    return;
  }
  for (idx p0 = 0; p0 < depth; p0 += depth_block) {
    const idx d = std::min(depth_block, depth - p0);
    const bool first = p0 == 0;
    const S* Lp = L + p0 * lp;
    const S* Rp = R + p0 * ldr;
    idx j = 0;
    for (; j + NV * w <= cols; j += NV * w) {
      column_block<S, RI, NV>(rows, first, Lp, li, lp, Rp + j, ldr, O + j, ldo, d);
    }
    if (const int v = static_cast<int>((cols - j) / w); v > 0) {
      vector_columns<S, RI, NV - 1>(v, rows, first, Lp, li, lp, Rp + j, ldr, O + j, ldo, d);
      j += v * w;
    }
    for (; j < cols; ++j) {  // fewer columns than one vector (a 1-unit output layer)
      // Eight rows' sums side by side: independent add chains instead of one latency-bound chain,
      // each sum still in order of p.
      constexpr idx group = 8;
      idx i = 0;
      for (; i + group <= rows; i += group) {
        S acc[group];
        for (idx r = 0; r < group; ++r) acc[r] = first ? S(0) : O[(i + r) * ldo + j];
        for (idx p = 0; p < d; ++p) {
          const S rp = Rp[p * ldr + j];
          for (idx r = 0; r < group; ++r) acc[r] += Lp[(i + r) * li + p * lp] * rp;
        }
        for (idx r = 0; r < group; ++r) O[(i + r) * ldo + j] = acc[r];
      }
      for (; i < rows; ++i) {
        S acc = first ? S(0) : O[i * ldo + j];
        for (idx p = 0; p < d; ++p) acc += Lp[i * li + p * lp] * Rp[p * ldr + j];
        O[i * ldo + j] = acc;
      }
    }
  }
}

bool elementwise(activation a) { return a != activation::softmax; }

}  // namespace

template <class S>
dense_layer<S>::dense_layer(idx inputs, idx units, activation act, idx max_batch, storage_fill fill,
                            input_gradient input_grad)
    : act_(act),
      padded_batch_(round_up(max_batch, lanes<S>)),
      kernel_(inputs, units, fill),
      bias_(units),
      kernel_grad_(inputs, units),
      bias_grad_(units),
      out_(row_matrix<S>::Zero(max_batch, units)),
      out_grad_(row_matrix<S>::Zero(max_batch, units)),
      grad_t_(input_grad == input_gradient::computed ? row_matrix<S>::Zero(units, padded_batch_)
                                                     : row_matrix<S>()) {
  prepare_storage(bias_.data(), static_cast<std::size_t>(bias_.size()), fill);
}

template <class S>
idx dense_layer<S>::scratch_size() const {
  return panel_rows * (units() + padded_batch_);
}

template <class S>
void dense_layer<S>::forward_team(const_matrix_map<S> x, bool apply_activation, const team& t) {
  const idx rows = x.rows(), k = inputs(), n = units();
  const activation a = apply_activation ? act_ : activation::linear;
  // Threads own whole SIMD-width blocks of output columns: each reads only its columns of W.
  const index_range c = t.part(n, lanes<S>);
  if (c.begin < c.end) {
    S* z = out_.data() + c.begin;
    gemm<S, wide_rows, wide_vectors>(rows, c.end - c.begin, k, x.data(), x.cols(), 1,
                                     kernel().data() + c.begin, n, z, n, forward_depth_block);
    // Bias and (elementwise) activation on the block just written, while it is in cache.
    bias_activation_block<S>(elementwise(a) ? a : activation::linear, z, rows, c.end - c.begin, n,
                             bias_.data() + c.begin);
  }
  if (t.id == 0) rows_ = rows;
  t.barrier();
  if (!elementwise(a)) {  // softmax needs whole rows
    const index_range r = t.part(rows);
    if (r.begin < r.end) {
      bias_activation_forward<S>(a, matrix_map<S>(out_.data() + r.begin * n, r.end - r.begin, n),
                                 nullptr);
    }
    t.barrier();
  }
}

template <class S>
void dense_layer<S>::prepare_output_grad(bool grad_is_preactivation) {
  const idx rows = rows_, n = units();
  if (!grad_is_preactivation) activation_backward<S>(act_, output(), output_grad());
  if (grad_t_.size() == 0) return;  // no dX to compute from it
  const idx bp = round_up(rows, lanes<S>);
  for (idx j = 0; j < n; ++j) {
    S* row = grad_t_.data() + j * padded_batch_;
    for (idx b = 0; b < rows; ++b) row[b] = out_grad_(b, j);
    std::fill(row + rows, row + bp, S(0));
  }
}

template <class S>
void dense_layer<S>::backward_team(const_matrix_map<S> x, const team& t, S* scratch,
                                   const gradient_sink<S>* sink, dense_layer* lower, S* dx) {
  const idx rows = rows_, k = inputs(), n = units();
  const S* dz = out_grad_.data();
  const idx bp = round_up(rows, lanes<S>);
  const bool lower_elementwise = lower && elementwise(lower->act_);
  // The layer below keeps its dL/dZ transposed only when it computes a dX of its own.
  const bool lower_transposed = lower && lower->grad_t_.size() != 0;
  if (lower) dx = lower->out_grad_.data();
  assert(!dx || grad_t_.size() != 0);
  S* dw_block = scratch;
  S* dxt_block = dw_block + panel_rows * n;
  // Each thread owns a range of kernel rows: it reads them for dX, then (fused) updates them.
  // Bounds on whole vectors keep the threads' columns of dX in separate cache lines.
  const index_range kr = t.part(k, lanes<S>);
  for (idx k0 = kr.begin; k0 < kr.end; k0 += panel_rows) {
    const idx pr = std::min(panel_rows, kr.end - k0);
    if (dx && rows > 0) {
      // dX^T[k0 .. k0+pr) = W[k0 .. k0+pr) dZ^T: sums over units, W rows streamed in order.
      gemm<S, tall_rows, tall_vectors>(pr, bp, n, kernel().data() + k0 * n, n, 1, grad_t_.data(),
                                       padded_batch_, dxt_block, bp, n);
      if (lower_elementwise) {
        // The layer below's dL/dZ = dL/dY * act'(Y), elementwise as activation_backward computes
        // it, written both ways round: these columns of it are this thread's alone.
        const S* y = lower->out_.data();
        const activation a = lower->act_;
        for (idx i = 0; i < pr; ++i) {
          S* gt =
              lower_transposed ? lower->grad_t_.data() + (k0 + i) * lower->padded_batch_ : nullptr;
          for (idx b = 0; b < rows; ++b) {
            const S g = dxt_block[i * bp + b];
            const S yb = y[b * k + k0 + i];
            S d = g;
            switch (a) {
              case activation::relu:
                d = yb > S(0) ? g : S(0);
                break;
              case activation::sigmoid:
                d = g * (yb * (S(1) - yb));
                break;
              case activation::tanh:
                d = g * (S(1) - yb * yb);
                break;
              case activation::linear:
              case activation::softmax:
                break;
            }
            dx[b * k + k0 + i] = d;
            if (lower_transposed) gt[b] = d;
          }
          if (lower_transposed) std::fill(gt + rows, gt + bp, S(0));
        }
      } else {
        for (idx b = 0; b < rows; ++b) {
          for (idx i = 0; i < pr; ++i) dx[b * k + k0 + i] = dxt_block[i * bp + b];
        }
      }
    }
    // dW[k0 .. k0+pr) = X^T dZ: sums over the batch, X read transposed.
    S* dw = sink ? dw_block : kernel_grad_.data() + k0 * n;
    gemm<S, wide_rows, wide_vectors>(pr, n, rows, x.data() + k0, 1, x.cols(), dz, n, dw, n, rows);
    if (sink) sink->apply(sink->ctx, sink->kernel_index, k0 * n, (k0 + pr) * n, dw);
  }
  // Bias: column sums in batch order; each thread owns whole columns.
  const index_range c = t.part(n, lanes<S>);
  for (idx j = c.begin; j < c.end; ++j) bias_grad_(j) = S(0);
  for (idx b = 0; b < rows; ++b) {
    const S* row = dz + b * n;
    for (idx j = c.begin; j < c.end; ++j) bias_grad_(j) += row[j];
  }
  if (sink && c.begin < c.end) {
    sink->apply(sink->ctx, sink->bias_index, c.begin, c.end, bias_grad_.data() + c.begin);
  }
  t.barrier();
  if (lower && !lower_elementwise) {  // softmax: whole rows first, then the transpose
    const index_range r = t.part(rows);
    if (r.begin < r.end) {
      activation_backward<S>(
          lower->act_, const_matrix_map<S>(lower->out_.data() + r.begin * k, r.end - r.begin, k),
          matrix_map<S>(lower->out_grad_.data() + r.begin * k, r.end - r.begin, k));
    }
    t.barrier();
    const index_range kc = lower_transposed ? t.part(k) : index_range{0, 0};
    for (idx j = kc.begin; j < kc.end; ++j) {
      S* gt = lower->grad_t_.data() + j * lower->padded_batch_;
      for (idx b = 0; b < rows; ++b) gt[b] = dx[b * k + j];
      std::fill(gt + rows, gt + bp, S(0));
    }
    t.barrier();
  }
}

template <class S>
const_matrix_map<S> dense_layer<S>::forward(const_matrix_map<S> x, bool apply_activation) {
  run_team(2 * x.rows() * inputs() * units(),
           [&](const team& t) { forward_team(x, apply_activation, t); });
  return output();
}

template <class S>
void dense_layer<S>::backward(const_matrix_map<S> x, bool grad_is_preactivation, S* dx) {
  const auto per_thread = static_cast<std::size_t>(scratch_size());
  const auto needed = static_cast<std::size_t>(thread_count()) * per_thread;
  if (scratch_.size() < needed) scratch_.resize(needed);
  prepare_output_grad(grad_is_preactivation);
  run_team(4 * rows_ * inputs() * units(), [&](const team& t) {
    backward_team(x, t, scratch_.data() + static_cast<std::size_t>(t.id) * per_thread, nullptr,
                  nullptr, dx);
  });
}

template <class S>
void dense_layer<S>::activate_output() {
  bias_activation_forward<S>(act_, matrix_map<S>(out_.data(), rows_, units()), nullptr);
}

template class dense_layer<float>;
template class dense_layer<double>;

}  // namespace baton::worker
