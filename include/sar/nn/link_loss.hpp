// Link prediction's loss: binary cross-entropy with logits over scored pairs, the positives
// labelled 1 and their negatives 0, as DGL's and PyG's link-prediction examples train.
#pragma once

#include <cmath>
#include <span>

#include "sar/core/error.hpp"

namespace sar {

/// Binary cross-entropy with logits of `positive` scores (label 1) and `negative` scores
/// (label 0): returns (sum softplus(-p) + sum softplus(n)) / normaliser, and assigns its
/// gradient to dpositive and dnegative (same sizes as the scores). The normaliser is the number
/// of scored pairs over all ranks (a mean that does not depend on the rank count). Throws
/// sar::invalid_argument for mismatched sizes or a normaliser <= 0. Not collective.
template <class T>
double link_loss(std::span<const T> positive, std::span<const T> negative, double normaliser,
                 std::span<T> dpositive, std::span<T> dnegative) {
  SAR_CHECK(dpositive.size() == positive.size() && dnegative.size() == negative.size() &&
                normaliser > 0,
            invalid_argument, "sar::link_loss: ", positive.size(), " positive and ",
            negative.size(), " negative scores, gradients of ", dpositive.size(), " and ",
            dnegative.size(), ", normaliser ", normaliser);
  // softplus(x) = log(1 + e^x) = max(x, 0) + log1p(e^-|x|); its derivative is sigmoid(x).
  const auto softplus = [](double x) {
    return std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x)));
  };
  const auto sigmoid = [](double x) {
    return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x));
  };
  double loss = 0;
  for (std::size_t i = 0; i < positive.size(); ++i) {
    const double s = static_cast<double>(positive[i]);
    loss += softplus(-s);
    dpositive[i] = static_cast<T>((sigmoid(s) - 1) / normaliser);
  }
  for (std::size_t i = 0; i < negative.size(); ++i) {
    const double s = static_cast<double>(negative[i]);
    loss += softplus(s);
    dnegative[i] = static_cast<T>(sigmoid(s) / normaliser);
  }
  return loss / normaliser;
}

}  // namespace sar
