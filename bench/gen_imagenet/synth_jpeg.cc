#include "gen_imagenet/synth_jpeg.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace granary::bench {
namespace {

constexpr int kNoiseAmplitude = 28;  // noise in [-amp, amp] per channel: sets bytes/pixel
constexpr double kFillRatio = 0.93;  // aim the image at this share of the target
constexpr size_t kComMaxPayload = 65533;

// Aspect ratios (width/height) of photos, roughly as common in ImageNet.
double PickAspect(Rng& rng) {
  double u = rng.Uniform();
  if (u < 0.58) return 4.0 / 3.0;
  if (u < 0.73) return 3.0 / 4.0;
  if (u < 0.83) return 1.0;
  if (u < 0.93) return 3.0 / 2.0;
  return 16.0 / 9.0;
}

// Appends one COM segment (FF FE len payload) holding `payload`.
void AppendCom(std::string& out, const char* payload, size_t n) {
  size_t len = n + 2;
  out.push_back(static_cast<char>(0xFF));
  out.push_back(static_cast<char>(0xFE));
  out.push_back(static_cast<char>(len >> 8));
  out.push_back(static_cast<char>(len & 0xFF));
  out.append(payload, n);
}

// Appends COM segments totalling exactly `bytes` (>= 4) of filler from `rng`.
void AppendFiller(std::string& out, size_t bytes, Rng& rng) {
  std::string chunk;
  while (bytes >= 4) {
    size_t payload = std::min(bytes - 4, kComMaxPayload);
    // Never leave a remainder of 1..3 bytes, which no segment can hold.
    size_t rest = bytes - 4 - payload;
    if (rest > 0 && rest < 4) payload -= 4 - rest;
    chunk.resize(payload);
    for (size_t i = 0; i < payload; i += 8) {
      uint64_t r = rng.Next() & 0x7f7f7f7f7f7f7f7full;  // no 0xFF bytes
      std::memcpy(&chunk[i], &r, std::min<size_t>(8, payload - i));
    }
    AppendCom(out, chunk.data(), payload);
    bytes -= payload + 4;
  }
}

}  // namespace

NoiseTile::NoiseTile(uint64_t seed) : pixels_(static_cast<size_t>(kSide) * kSide * 3) {
  Rng rng(Mix64(seed ^ 0x7113ull));
  for (size_t i = 0; i < pixels_.size(); i += 8) {
    uint64_t r = rng.Next();
    std::memcpy(&pixels_[i], &r, std::min<size_t>(8, pixels_.size() - i));
  }
}

Result<std::unique_ptr<SynthJpegEncoder>> SynthJpegEncoder::Create(int quality,
                                                                   const NoiseTile* tile) {
  if (quality < 1 || quality > 100) {
    return InvalidArgument("--quality " + std::to_string(quality) + ": must be in 1..100");
  }
  tjhandle h = tjInitCompress();
  if (h == nullptr) return Internal(std::string("tjInitCompress: ") + tjGetErrorStr2(nullptr));
  return std::unique_ptr<SynthJpegEncoder>(new SynthJpegEncoder(h, quality, tile));
}

SynthJpegEncoder::~SynthJpegEncoder() {
  if (jpeg_buf_ != nullptr) tjFree(jpeg_buf_);
  tjDestroy(handle_);
}

void SynthJpegEncoder::Paint(uint64_t seed, int width, int height) {
  Rng rng(seed ^ 0xc0104ull);
  int base[3], gx[3], gy[3];  // 1/256 units of a pixel value
  for (int c = 0; c < 3; ++c) {
    base[c] = static_cast<int>((40 + rng.Uniform() * 175) * 256);
    gx[c] = static_cast<int>((rng.Uniform() - 0.5) * 160 * 256 / width);
    gy[c] = static_cast<int>((rng.Uniform() - 0.5) * 160 * 256 / height);
  }
  const int mask = NoiseTile::kSide - 1;
  int ox = static_cast<int>(rng.Next() & mask), oy = static_cast<int>(rng.Next() & mask);
  pixels_.resize(static_cast<size_t>(width) * height * 3);
  uint8_t* out = pixels_.data();
  for (int y = 0; y < height; ++y) {
    const uint8_t* noise = tile_->Row((y + oy) & mask);
    for (int x = 0; x < width; ++x) {
      const uint8_t* n = noise + ((x + ox) & mask) * 3;
      for (int c = 0; c < 3; ++c) {
        int v = (base[c] + gx[c] * x + gy[c] * y) / 256 + ((n[c] - 128) * kNoiseAmplitude) / 128;
        *out++ = static_cast<uint8_t>(std::clamp(v, 0, 255));
      }
    }
  }
}

Result<size_t> SynthJpegEncoder::Compress(int width, int height) {
  unsigned long need = tjBufSize(width, height, TJSAMP_420);
  if (need > jpeg_cap_) {
    if (jpeg_buf_ != nullptr) tjFree(jpeg_buf_);
    jpeg_buf_ = tjAlloc(static_cast<int>(need));
    if (jpeg_buf_ == nullptr) return NoSpace("tjAlloc " + std::to_string(need) + " bytes");
    jpeg_cap_ = need;
  }
  unsigned long size = jpeg_cap_;
  if (tjCompress2(handle_, pixels_.data(), width, 0, height, TJPF_RGB, &jpeg_buf_, &size,
                  TJSAMP_420, quality_, TJFLAG_NOREALLOC) != 0) {
    return Internal(std::string("tjCompress2: ") + tjGetErrorStr2(handle_));
  }
  return static_cast<size_t>(size);
}

Result<double> SynthJpegEncoder::CalibrateBytesPerPixel() {
  constexpr int kW = 500, kH = 375, kProbes = 4;
  double bytes = 0;
  for (int i = 0; i < kProbes; ++i) {
    Paint(Mix64(0xca11b + i), kW, kH);
    ASSIGN_OR_RETURN(size_t n, Compress(kW, kH));
    bytes += static_cast<double>(n);
  }
  return bytes / (static_cast<double>(kW) * kH * kProbes);
}

Result<EncodedJpeg> SynthJpegEncoder::Encode(const FileSpec& spec, double bytes_per_pixel,
                                             const std::string& tag) {
  Rng rng(spec.file_seed ^ 0xd1ull);
  double aspect = PickAspect(rng);
  double pixels = spec.target_bytes * kFillRatio / bytes_per_pixel;
  size_t size = 0;
  int w = 0, h = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    w = std::max(16, static_cast<int>(std::lround(std::sqrt(pixels * aspect))));
    h = std::max(16, static_cast<int>(std::lround(w / aspect)));
    Paint(spec.file_seed, w, h);
    ASSIGN_OR_RETURN(size, Compress(w, h));
    size_t with_tag = size + tag.size() + 4;
    if (with_tag <= spec.target_bytes || attempt == 1) break;
    // Overshot: shrink by the measured ratio and try once more.
    pixels *= kFillRatio * spec.target_bytes / static_cast<double>(with_tag);
  }
  EncodedJpeg out{.width = w, .height = h};
  out.bytes.reserve(std::max<size_t>(spec.target_bytes, size + tag.size() + 4));
  out.bytes.append(reinterpret_cast<const char*>(jpeg_buf_), 2);  // SOI
  AppendCom(out.bytes, tag.data(), tag.size());
  size_t filled = out.bytes.size() + (size - 2);
  if (spec.target_bytes >= filled + 4) AppendFiller(out.bytes, spec.target_bytes - filled, rng);
  out.bytes.append(reinterpret_cast<const char*>(jpeg_buf_) + 2, size - 2);
  return out;
}

}  // namespace granary::bench
