#include "reader/decode_augment.h"

#include <algorithm>
#include <cmath>

namespace granary::bench {
namespace {

constexpr float kMean[3] = {0.485f, 0.456f, 0.406f};
constexpr float kStd[3] = {0.229f, 0.224f, 0.225f};

}  // namespace

Result<std::unique_ptr<DecodeAugmenter>> DecodeAugmenter::Create() {
  tjhandle h = tjInitDecompress();
  if (h == nullptr) return Internal(std::string("tjInitDecompress: ") + tjGetErrorStr2(nullptr));
  return std::unique_ptr<DecodeAugmenter>(new DecodeAugmenter(h));
}

DecodeAugmenter::~DecodeAugmenter() { tjDestroy(handle_); }

// torchvision's RandomResizedCrop.get_params: 10 tries at a random area and
// log-uniform aspect, then a centre crop clamped to the aspect range.
DecodeAugmenter::Crop DecodeAugmenter::PickCrop(int width, int height, Rng& rng) {
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(3.0 / 4.0), log_hi = std::log(4.0 / 3.0);
  for (int attempt = 0; attempt < 10; ++attempt) {
    double target = area * (0.08 + 0.92 * rng.Uniform());
    double ratio = std::exp(log_lo + (log_hi - log_lo) * rng.Uniform());
    int w = static_cast<int>(std::lround(std::sqrt(target * ratio)));
    int h = static_cast<int>(std::lround(std::sqrt(target / ratio)));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      int x = static_cast<int>(rng.Next() % static_cast<uint64_t>(width - w + 1));
      int y = static_cast<int>(rng.Next() % static_cast<uint64_t>(height - h + 1));
      return {x, y, w, h};
    }
  }
  double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < 3.0 / 4.0) {
    h = static_cast<int>(std::lround(w / (3.0 / 4.0)));
  } else if (in_ratio > 4.0 / 3.0) {
    w = static_cast<int>(std::lround(h * (4.0 / 3.0)));
  }
  w = std::min(w, width);
  h = std::min(h, height);
  return {(width - w) / 2, (height - h) / 2, w, h};
}

void DecodeAugmenter::ResizeNormalize(int width, Crop crop, bool flip) {
  const float sx = static_cast<float>(crop.w) / kOut, sy = static_cast<float>(crop.h) / kOut;
  const size_t plane = static_cast<size_t>(kOut) * kOut;
  for (int oy = 0; oy < kOut; ++oy) {
    float fy = std::clamp((oy + 0.5f) * sy - 0.5f, 0.0f, static_cast<float>(crop.h - 1));
    int y0 = static_cast<int>(fy), y1 = std::min(y0 + 1, crop.h - 1);
    float wy = fy - y0;
    const uint8_t* r0 = &rgb_[(static_cast<size_t>(crop.y + y0) * width + crop.x) * 3];
    const uint8_t* r1 = &rgb_[(static_cast<size_t>(crop.y + y1) * width + crop.x) * 3];
    for (int ox = 0; ox < kOut; ++ox) {
      float fx = std::clamp((ox + 0.5f) * sx - 0.5f, 0.0f, static_cast<float>(crop.w - 1));
      int x0 = static_cast<int>(fx), x1 = std::min(x0 + 1, crop.w - 1);
      float wx = fx - x0;
      int dst_x = flip ? kOut - 1 - ox : ox;
      for (int c = 0; c < 3; ++c) {
        float top = r0[x0 * 3 + c] * (1 - wx) + r0[x1 * 3 + c] * wx;
        float bottom = r1[x0 * 3 + c] * (1 - wx) + r1[x1 * 3 + c] * wx;
        float v = (top * (1 - wy) + bottom * wy) / 255.0f;
        tensor_[c * plane + static_cast<size_t>(oy) * kOut + dst_x] = (v - kMean[c]) / kStd[c];
      }
    }
  }
}

Status DecodeAugmenter::Process(std::span<const char> jpeg, Rng& rng) {
  auto* data = reinterpret_cast<const unsigned char*>(jpeg.data());
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(handle_, data, jpeg.size(), &width, &height, &subsamp, &colorspace) !=
      0) {
    return Corruption(std::string("jpeg header: ") + tjGetErrorStr2(handle_));
  }
  rgb_.resize(static_cast<size_t>(width) * height * 3);
  if (tjDecompress2(handle_, data, jpeg.size(), rgb_.data(), width, 0, height, TJPF_RGB, 0) != 0) {
    return Corruption(std::string("jpeg decode: ") + tjGetErrorStr2(handle_));
  }
  Crop crop = PickCrop(width, height, rng);
  ResizeNormalize(width, crop, (rng.Next() & 1) != 0);
  return Status::Ok();
}

}  // namespace granary::bench
