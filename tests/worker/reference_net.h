// An independent double-precision implementation of the 3 -> 4 relu -> 1 sigmoid network with
// BCE, written with plain loops straight from the formulas, for the Keras-semantics tests of the
// optimizers: the worker's float model and optimizer must land on the same weights.
#pragma once

#include <array>
#include <cmath>
#include <vector>

namespace baton::worker::testing {

struct reference_net {
  std::array<std::array<double, 4>, 3> w1{
      {{0.5, -0.3, 0.8, 0.1}, {-0.6, 0.2, 0.4, -0.7}, {0.3, 0.9, -0.2, 0.6}}};
  std::array<double, 4> b1{0.05, -0.1, 0.0, 0.2};
  std::array<double, 4> w2{0.7, -0.5, 0.3, 0.9};
  double b2 = -0.1;

  // Flat order matching the model's parameters(): layers.0.kernel (row-major), .bias, layers.1...
  std::vector<double*> flat() {
    std::vector<double*> p;
    for (auto& row : w1)
      for (auto& w : row) p.push_back(&w);
    for (auto& b : b1) p.push_back(&b);
    for (auto& w : w2) p.push_back(&w);
    p.push_back(&b2);
    return p;
  }

  // Gradient of the mean BCE over the batch, in flat() order. dL/dz2 = (p - y)/B.
  std::vector<double> gradient(const std::vector<std::array<double, 3>>& x,
                               const std::vector<double>& y) const {
    std::vector<double> g(12 + 4 + 4 + 1, 0.0);
    const double batch = static_cast<double>(x.size());
    for (std::size_t n = 0; n < x.size(); ++n) {
      std::array<double, 4> z1{}, a1{};
      double z2 = b2;
      for (int j = 0; j < 4; ++j) {
        z1[j] = b1[j];
        for (int k = 0; k < 3; ++k) z1[j] += x[n][k] * w1[k][j];
        a1[j] = z1[j] > 0 ? z1[j] : 0;
        z2 += a1[j] * w2[j];
      }
      const double p = 1 / (1 + std::exp(-z2));
      const double dz2 = (p - y[n]) / batch;
      for (int j = 0; j < 4; ++j) {
        g[16 + j] += a1[j] * dz2;
        const double dz1 = z1[j] > 0 ? dz2 * w2[j] : 0;
        for (int k = 0; k < 3; ++k) g[k * 4 + j] += x[n][k] * dz1;
        g[12 + j] += dz1;
      }
      g[20] += dz2;
    }
    return g;
  }
};

// Three batches of a fixed data set; the last one short, as an epoch's final batch.
inline std::vector<std::vector<std::array<double, 3>>> reference_batches_x() {
  return {{{0.2, -1.0, 0.5}, {1.5, 0.3, -0.4}, {-0.7, 0.8, 1.1}, {0.0, -0.2, -1.3}},
          {{1.0, 1.0, 1.0}, {-1.2, 0.4, 0.3}, {0.6, -0.9, 0.2}, {0.3, 0.3, -0.8}},
          {{-0.5, -0.5, 2.0}, {2.2, -1.1, 0.1}}};
}
inline std::vector<std::vector<double>> reference_batches_y() {
  return {{0, 1, 1, 0}, {1, 0, 0, 1}, {1, 0}};
}

}  // namespace baton::worker::testing
