#include "worker/activation.h"

#include <cassert>

#include "worker/parallel.h"

namespace baton::worker {

namespace {

// Rough flops per element, to decide whether a batch is worth waking the team for.
std::int64_t cost_per_element(activation a) {
  switch (a) {
    case activation::relu:
    case activation::linear:
      return 1;
    case activation::sigmoid:
    case activation::tanh:
    case activation::softmax:
      return 20;
  }
  return 1;
}

template <class S, class Block>
void softmax_rows(Block&& z) {
  for (idx r = 0; r < z.rows(); ++r) {
    auto row = z.row(r).array();
    const S m = row.maxCoeff();
    row = (row - m).exp();
    row /= row.sum();
  }
}

// block <- act(pre), where `pre` is an expression over block (Z, or Z + bias): Eigen evaluates
// the whole right-hand side in one pass, so the bias add costs no extra sweep over memory.
template <class S, class Block, class Expr>
void assign_activation(activation a, Block& block, const Expr& pre) {
  switch (a) {
    case activation::linear:
      block = pre;
      break;
    case activation::relu:
      block = pre.cwiseMax(S(0));
      break;
    case activation::sigmoid:
      block = pre.array().logistic().matrix();
      break;
    case activation::tanh:
      block = pre.array().tanh().matrix();
      break;
    case activation::softmax:
      block = pre;
      softmax_rows<S>(block);
      break;
  }
}

}  // namespace

template <class S>
void bias_activation_forward(activation a, matrix_map<S> z, const S* bias) {
  const idx cols = z.cols();
  parallel_for(z.rows(), cols * cost_per_element(a), [&](std::int64_t r0, std::int64_t r1) {
    auto block = z.middleRows(r0, r1 - r0);
    if (bias) {
      const Eigen::Map<const row_vector<S>> b(bias, cols);
      assign_activation<S>(a, block, block.rowwise() + b);
    } else if (a != activation::linear) {
      assign_activation<S>(a, block, block);
    }
  });
}

template <class S>
void bias_activation_block(activation a, S* z, idx rows, idx cols, idx ld, const S* bias) {
  assert(a != activation::softmax);
  Eigen::Map<row_matrix<S>, 0, Eigen::OuterStride<>> block(z, rows, cols, Eigen::OuterStride<>(ld));
  if (bias) {
    const Eigen::Map<const row_vector<S>> b(bias, cols);
    assign_activation<S>(a, block, block.rowwise() + b);
  } else if (a != activation::linear) {
    assign_activation<S>(a, block, block);
  }
}

template <class S>
void activation_backward(activation a, const_matrix_map<S> y, matrix_map<S> grad) {
  if (a == activation::linear) return;
  parallel_for(grad.rows(), grad.cols() * 4, [&](std::int64_t r0, std::int64_t r1) {
    auto g = grad.middleRows(r0, r1 - r0).array();
    const auto yb = y.middleRows(r0, r1 - r0).array();
    switch (a) {
      case activation::linear:
        break;
      case activation::relu:
        g = (yb > S(0)).select(g, S(0));
        break;
      case activation::sigmoid:
        g *= yb * (S(1) - yb);
        break;
      case activation::tanh:
        g *= S(1) - yb * yb;
        break;
      case activation::softmax:
        for (idx r = 0; r < g.rows(); ++r) {
          const S dot = (g.row(r) * yb.row(r)).sum();
          g.row(r) = yb.row(r) * (g.row(r) - dot);
        }
        break;
    }
  });
}

std::string_view activation_name(activation a) {
  switch (a) {
    case activation::relu:
      return "relu";
    case activation::sigmoid:
      return "sigmoid";
    case activation::tanh:
      return "tanh";
    case activation::linear:
      return "linear";
    case activation::softmax:
      return "softmax";
  }
  return "unknown";
}

template void bias_activation_forward<float>(activation, matrix_map<float>, const float*);
template void bias_activation_forward<double>(activation, matrix_map<double>, const double*);
template void bias_activation_block<float>(activation, float*, idx, idx, idx, const float*);
template void bias_activation_block<double>(activation, double*, idx, idx, idx, const double*);
template void activation_backward<float>(activation, const_matrix_map<float>, matrix_map<float>);
template void activation_backward<double>(activation, const_matrix_map<double>, matrix_map<double>);

}  // namespace baton::worker
