#include "worker/loss.h"

#include <algorithm>
#include <cmath>

namespace baton::worker {

namespace {

template <class S>
S stable_sigmoid(S z) {
  if (z >= S(0)) return S(1) / (S(1) + std::exp(-z));
  const S e = std::exp(z);
  return e / (S(1) + e);
}

// log(1 + e^z) without overflow for large z.
template <class S>
S bce_from_logit(S z, S y) {
  return std::max(z, S(0)) - z * y + std::log1p(std::exp(-std::abs(z)));
}

template <class Row>
idx argmax(const Row& row) {
  idx best = 0;
  for (idx j = 1; j < row.size(); ++j) {
    if (row(j) > row(best)) best = j;
  }
  return best;
}

}  // namespace

template <class S>
loss_function<S>::loss_function(loss_kind kind, activation last) {
  switch (kind) {
    case loss_kind::binary_crossentropy:
      mode_ = last == activation::sigmoid ? mode::bce_logits : mode::bce_probabilities;
      break;
    case loss_kind::categorical_crossentropy:
      mode_ = last == activation::softmax ? mode::cce_logits : mode::cce_probabilities;
      break;
    case loss_kind::mse:
      mode_ = mode::mse;
      break;
  }
}

template <class S>
double loss_function<S>::sum(const_matrix_map<S> out, const_matrix_map<S> target) const {
  const idx rows = out.rows();
  const idx cols = out.cols();
  const S eps = S(probability_epsilon);
  double total = 0.0;
  for (idx r = 0; r < rows; ++r) {
    S l = 0;
    switch (mode_) {
      case mode::bce_logits:
        for (idx j = 0; j < cols; ++j) l += bce_from_logit(out(r, j), target(r, j));
        l /= S(cols);
        break;
      case mode::bce_probabilities:
        for (idx j = 0; j < cols; ++j) {
          const S p = std::clamp(out(r, j), eps, S(1) - eps);
          const S y = target(r, j);
          l -= y * std::log(p) + (S(1) - y) * std::log(S(1) - p);
        }
        l /= S(cols);
        break;
      case mode::cce_logits: {
        const S m = out.row(r).maxCoeff();
        const S lse = std::log((out.row(r).array() - m).exp().sum());
        for (idx j = 0; j < cols; ++j) l -= target(r, j) * (out(r, j) - m - lse);
        break;
      }
      case mode::cce_probabilities: {
        const S s = out.row(r).sum();
        for (idx j = 0; j < cols; ++j) {
          l -= target(r, j) * std::log(std::clamp(out(r, j) / s, eps, S(1) - eps));
        }
        break;
      }
      case mode::mse:
        for (idx j = 0; j < cols; ++j) {
          const S d = out(r, j) - target(r, j);
          l += d * d;
        }
        l /= S(cols);
        break;
    }
    total += static_cast<double>(l);
  }
  return total;
}

template <class S>
double loss_function<S>::forward_backward(const_matrix_map<S> out, const_matrix_map<S> target,
                                          matrix_map<S> grad) const {
  const idx rows = out.rows();
  const idx cols = out.cols();
  const S eps = S(probability_epsilon);
  // Per-sample losses are averaged over units (BCE, MSE) and then over samples.
  const S per_element = S(1) / S(rows * cols);
  const S per_sample = S(1) / S(rows);
  for (idx r = 0; r < rows; ++r) {
    switch (mode_) {
      case mode::bce_logits:
        for (idx j = 0; j < cols; ++j) {
          grad(r, j) = (stable_sigmoid(out(r, j)) - target(r, j)) * per_element;
        }
        break;
      case mode::bce_probabilities:
        for (idx j = 0; j < cols; ++j) {
          const S p = out(r, j);
          const S y = target(r, j);
          grad(r, j) =
              (p < eps || p > S(1) - eps) ? S(0) : (p - y) / (p * (S(1) - p)) * per_element;
        }
        break;
      case mode::cce_logits: {
        const S m = out.row(r).maxCoeff();
        const S denom = (out.row(r).array() - m).exp().sum();
        const S ysum = target.row(r).sum();
        for (idx j = 0; j < cols; ++j) {
          grad(r, j) = (std::exp(out(r, j) - m) / denom * ysum - target(r, j)) * per_sample;
        }
        break;
      }
      case mode::cce_probabilities: {
        // Through q = p / s: dl/dp_k = (g_k - sum_j g_j q_j) / s with g_j = dl/dq_j.
        const S s = out.row(r).sum();
        S gq = 0;
        for (idx j = 0; j < cols; ++j) {
          const S q = out(r, j) / s;
          const S g = (q < eps || q > S(1) - eps) ? S(0) : -target(r, j) / q;
          grad(r, j) = g;
          gq += g * q;
        }
        for (idx j = 0; j < cols; ++j) grad(r, j) = (grad(r, j) - gq) / s * per_sample;
        break;
      }
      case mode::mse:
        for (idx j = 0; j < cols; ++j) {
          grad(r, j) = S(2) * (out(r, j) - target(r, j)) * per_element;
        }
        break;
    }
  }
  return sum(out, target) / static_cast<double>(rows);
}

template <class S>
accuracy_count loss_function<S>::accuracy(const_matrix_map<S> out,
                                          const_matrix_map<S> target) const {
  accuracy_count c;
  const idx rows = out.rows();
  const idx cols = out.cols();
  const bool binary = mode_ == mode::bce_logits || mode_ == mode::bce_probabilities || cols == 1;
  if (binary) {
    for (idx r = 0; r < rows; ++r) {
      for (idx j = 0; j < cols; ++j) {
        const S p = mode_ == mode::bce_logits ? stable_sigmoid(out(r, j)) : out(r, j);
        const S predicted = p > S(0.5) ? S(1) : S(0);
        c.correct += predicted == target(r, j) ? 1 : 0;
      }
    }
    c.total = rows * cols;
  } else {
    // Softmax is monotone, so the argmax of logits is the argmax of probabilities.
    for (idx r = 0; r < rows; ++r) {
      c.correct += argmax(out.row(r)) == argmax(target.row(r)) ? 1 : 0;
    }
    c.total = rows;
  }
  return c;
}

template class loss_function<float>;
template class loss_function<double>;

}  // namespace baton::worker
