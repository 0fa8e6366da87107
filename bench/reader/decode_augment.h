// DecodeAugmenter: the CPU work a PyTorch DataLoader does per training image —
// JPEG decode (libjpeg-turbo), RandomResizedCrop to 224x224 (scale 0.08..1,
// aspect 3/4..4/3, bilinear), RandomHorizontalFlip, ToTensor + Normalize
// (float CHW) — in plain C++, so granary_reader --decode shows when a node
// becomes decode-bound rather than I/O-bound.
//
// Thread safety: one instance per thread (owns a tjhandle and buffers).
#pragma once

#include <turbojpeg.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "gen_imagenet/dataset_plan.h"
#include "granary/status.h"

namespace granary::bench {

class DecodeAugmenter {
 public:
  static constexpr int kOut = 224;  // output side

  static Result<std::unique_ptr<DecodeAugmenter>> Create();
  ~DecodeAugmenter();
  DecodeAugmenter(const DecodeAugmenter&) = delete;
  DecodeAugmenter& operator=(const DecodeAugmenter&) = delete;

  // Decodes `jpeg` and writes a 3x224x224 normalized tensor into tensor().
  // Crop and flip come from `rng`. Corruption naming libjpeg's complaint when
  // the bytes do not decode.
  Status Process(std::span<const char> jpeg, Rng& rng);

  const std::vector<float>& tensor() const { return tensor_; }

 private:
  explicit DecodeAugmenter(tjhandle h) : handle_(h), tensor_(3 * kOut * kOut) {}
  struct Crop {
    int x, y, w, h;
  };
  static Crop PickCrop(int width, int height, Rng& rng);
  // Bilinear resize of `crop` of rgb_ (image `width` wide) into tensor_.
  void ResizeNormalize(int width, Crop crop, bool flip);

  tjhandle handle_;
  std::vector<uint8_t> rgb_;
  std::vector<float> tensor_;
};

}  // namespace granary::bench
