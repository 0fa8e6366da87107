// SynthJpegEncoder: turns a FileSpec into a valid, decodable JPEG of (about)
// its target size, distinct from every other file.
//
// Pixels: a per-file colour gradient plus noise read from a shared tile at a
// per-file offset (cheap: no per-pixel RNG), RGB, encoded by libjpeg-turbo
// (tjCompress2, 4:2:0, fixed quality). Dimensions are chosen from the target
// size and a calibrated bytes-per-pixel so the encoded image lands just under
// the target; COM (comment) segments then carry a tag naming the seed and index
// (so every file is distinct) and filler bytes up to the exact target. An
// image that still comes out larger than its target is kept as is.
//
// Invariant: output depends only on (FileSpec, quality, bytes_per_pixel, tile
// seed) — never on the thread or the order of calls.
// Thread safety: NoiseTile is immutable and shared; one encoder per thread.
#pragma once

#include <turbojpeg.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gen_imagenet/dataset_plan.h"
#include "granary/status.h"

namespace granary::bench {

// A square tile of RGB noise that every file samples at its own offset.
class NoiseTile {
 public:
  static constexpr int kSide = 512;  // power of two: offsets wrap with a mask
  explicit NoiseTile(uint64_t seed);
  const uint8_t* Row(int y) const { return &pixels_[static_cast<size_t>(y) * kSide * 3]; }

 private:
  std::vector<uint8_t> pixels_;
};

struct EncodedJpeg {
  std::string bytes;  // the whole file
  int width = 0;
  int height = 0;
};

class SynthJpegEncoder {
 public:
  // `quality` 1..100. `tile` must outlive the encoder.
  static Result<std::unique_ptr<SynthJpegEncoder>> Create(int quality, const NoiseTile* tile);
  ~SynthJpegEncoder();
  SynthJpegEncoder(const SynthJpegEncoder&) = delete;
  SynthJpegEncoder& operator=(const SynthJpegEncoder&) = delete;

  // Encoded bytes per pixel of this content at this quality, measured on a few
  // fixed probe images (deterministic). Used to pick dimensions.
  Result<double> CalibrateBytesPerPixel();

  // The file for `spec`. `tag` goes into a COM segment verbatim.
  Result<EncodedJpeg> Encode(const FileSpec& spec, double bytes_per_pixel, const std::string& tag);

 private:
  SynthJpegEncoder(tjhandle handle, int quality, const NoiseTile* tile)
      : handle_(handle), quality_(quality), tile_(tile) {}
  // Fills pixels_ with the synthetic image for `seed`.
  void Paint(uint64_t seed, int width, int height);
  // Compresses pixels_; the JPEG stays in jpeg_buf_ / returned size.
  Result<size_t> Compress(int width, int height);

  tjhandle handle_;
  int quality_;
  const NoiseTile* tile_;
  std::vector<uint8_t> pixels_;
  unsigned char* jpeg_buf_ = nullptr;  // tjAlloc'ed, jpeg_cap_ bytes
  unsigned long jpeg_cap_ = 0;
};

}  // namespace granary::bench
